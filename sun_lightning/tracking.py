"""Experiment tracking with the embedded MLflow store: where it lives, what a run is called and tagged,
which params it gets, and the parent run of a comparison (issue 19, "Results a researcher can look at").

A ``fit`` run is named ``<env>-<method>-seed<k>`` (e.g. ``FourRoomStuck-sun-seed0``) and tagged
``env``, ``env_id``, ``method``, ``seed`` and ``git_commit``; its params are the resolved config,
each hyperparameter once under its config path (``model.init_args.lr``), without the internal keys
of LightningCLI and jsonargparse. The comparison runner (:mod:`sun_lightning.compare`) nests the
runs of one comparison under a parent run (MLflow's ``mlflow.parentRunId`` tag).
"""

from __future__ import annotations

import fcntl
import functools
import subprocess
from pathlib import Path

import mlflow

from sun_lightning.methods import METHODS

MLFLOW_DIR = Path("mlruns")
MLFLOW_URI = f"sqlite:///{MLFLOW_DIR}/mlflow.db"


def local_store_uri() -> str:
    """:data:`MLFLOW_URI` of the current directory as an absolute URI: MLflow keeps one database engine per URI
    in a process, so a relative one would keep reading the first directory's store after a ``chdir``."""
    return f"sqlite:///{(MLFLOW_DIR / 'mlflow.db').resolve()}"

#: MLflow's system tag that nests a run under another in the UI.
PARENT_TAG = "mlflow.parentRunId"
#: Tag of a comparison's parent run (value ``comparison``); the ``fit`` runs have none.
KIND_TAG = "kind"

#: The selector class of the configs' default method: the DataModule's default selector (SPEC §3).
_DEFAULT_SELECTOR = "SUNAdaptive"


def prepare_store(tracking_uri: str, experiment: str, artifact_location: str | None = None) -> None:
    """Create a sqlite MLflow store and its experiment once, under a file lock.

    Runs started together on a fresh store (a comparison with ``--jobs 2``)
    otherwise race: both create the schema (one fails inside MLflow's
    migrations) or both create the experiment (one fails on the unique name).
    Other tracking URIs are left to MLflow.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return
    database = Path(tracking_uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        client = mlflow.MlflowClient(tracking_uri)  # creates and migrates the schema
        if client.get_experiment_by_name(experiment) is None:
            client.create_experiment(experiment, artifact_location=artifact_location)


# ---- run identity ------------------------------------------------------------------------------
def env_name(env_id: str) -> str:
    """The short name of a registered id: ``sun_lightning/FourRoomStuck-v0`` → ``FourRoomStuck``."""
    return env_id.rsplit("/", 1)[-1].rsplit("-v", 1)[0]


def method_of(selector_class_path: str) -> str:
    """The method name (a key of :data:`~sun_lightning.methods.METHODS`) of a selection rule's class path.

    Matched on the class name, so ``sun_lightning.goals.SUNEpisodic`` and
    ``sun_lightning.goals.variants.SUNEpisodic`` agree; a rule the methods table does not name
    (a user's own) is named by its class, lower-cased.
    """
    by_class = {args[args.index("--data.selector") + 1].rsplit(".", 1)[-1]: name
                for name, args in METHODS.items() if "--data.selector" in args}
    by_class.setdefault(_DEFAULT_SELECTOR, "sun")
    cls = selector_class_path.rsplit(".", 1)[-1]
    return by_class.get(cls, cls.lower())


def run_name(env_id: str, method: str, seed: int | None) -> str:
    """``<env>-<method>-seed<k>``: the name of a ``fit`` run, the key the comparison runner finds it by."""
    return f"{env_name(env_id)}-{method}-seed{seed}"


def run_tags(env_id: str, method: str, seed: int | None) -> dict[str, str]:
    """The tags of a ``fit`` run: ``env`` (short name), ``env_id``, ``method``, ``seed``, ``git_commit``."""
    return {"env": env_name(env_id), "env_id": env_id, "method": method, "seed": str(seed), "git_commit": git_commit()}


@functools.cache
def git_commit() -> str:
    """The commit checked out in this package's repository, or ``unknown`` outside one (an installed wheel).

    Read with ``git rev-parse`` (read-only); MLflow's own ``mlflow.source.git.commit`` tag depends on
    GitPython and on the entry point's path, so the run carries its commit explicitly too.
    """
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


# ---- params --------------------------------------------------------------------------------------
def config_params(tree: dict, skip: frozenset[str] | set[str] = frozenset(), prefix: str = "") -> dict[str, str]:
    """The resolved config as flat MLflow params: one per hyperparameter, keyed by its config path.

    Left out: keys starting with ``_`` (LightningCLI's ``_instantiator``/``_class_path`` and
    jsonargparse's ``__path__``: bookkeeping, not hyperparameters), the top-level ``config`` entry
    (the config files given, whose contents are the other params), and the dotted paths in ``skip``
    (values that are not settings, e.g. a linked argument or the run's own name and tags).

    Args:
        tree: the config as nested dicts (``Namespace.as_dict()``).
        skip: dotted paths to leave out, with everything below them.
        prefix: the dotted path of ``tree`` (for the recursion).
    """
    flat: dict[str, str] = {}
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if name.startswith("_") or key == "config" or key in skip:
            continue
        if isinstance(value, dict):
            flat.update(config_params(value, skip, key + "."))
        else:
            flat[key] = str(value)
    return flat


# ---- comparisons -------------------------------------------------------------------------------
def comparison_parent(client: mlflow.MlflowClient, experiment: str, env_id: str) -> str:
    """The id of the comparison's parent run in ``experiment``: the newest one there, else a new one.

    One parent per experiment, so a resumed comparison (``--report-only``, or a second invocation
    that runs the missing seeds) nests all its runs under one parent and overwrites its report.
    """
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    parents = client.search_runs([experiment_id], filter_string=f"tags.{KIND_TAG} = 'comparison'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if parents:
        return parents[0].info.run_id
    run = client.create_run(experiment_id, run_name=f"{env_name(env_id)}-comparison",
                            tags={KIND_TAG: "comparison", "env": env_name(env_id), "env_id": env_id,
                                  "git_commit": git_commit()})
    return run.info.run_id
