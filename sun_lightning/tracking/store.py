"""The embedded MLflow store: where it lives, how it is checked and created, which params a run gets, and the
parent run of a comparison.

A ``fit`` run's params are the resolved config,
each hyperparameter once under its config path (``model.init_args.lr``), without the internal keys
of LightningCLI and jsonargparse. The comparison runner (:mod:`sun_lightning.compare`) nests the
runs of one comparison under a parent run (MLflow's ``mlflow.parentRunId`` tag).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import ssl
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import mlflow

from sun_lightning.errors import ConfigError
from sun_lightning.tracking.naming import env_name, git_commit

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


#: The store a user can always fall back to, as the CLI option that selects it.
LOCAL_STORE_OPTION = f"--trainer.logger.init_args.tracking_uri {MLFLOW_URI}"
#: Seconds the start-up check waits for a tracking server before calling it unreachable.
SERVER_TIMEOUT_S = 4.0
#: MLflow's HTTP retry settings (``mlflow/environment_variables.py``), lowered from 7 retries with backoff
#: factor 2 and a 120 s timeout (minutes per call against a dead server): a server that dies mid-run costs a
#: stall of seconds per attempt, after which :class:`~sun_lightning.tracking.logger.SUNMLFlowLogger` holds
#: the records back. Set only where the user has not set them.
HTTP_RETRY_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def is_server(tracking_uri: str) -> bool:
    """Whether ``tracking_uri`` names a tracking server (``http://`` or ``https://``) rather than a local store."""
    return tracking_uri.startswith(("http://", "https://"))


def limit_http_retries() -> None:
    """Cap MLflow's HTTP retries and timeout (:data:`HTTP_RETRY_ENV`) unless the environment sets them."""
    for name, value in HTTP_RETRY_ENV.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def quiet_store_logs():
    """Silence logging while a store call runs: MLflow logs every SQL error with its traceback, and urllib3 each HTTP
    retry; the caller reports the failure itself, in one line."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def absolute_uri(uri: str) -> str:
    """``sqlite:///mlruns/mlflow.db`` with an absolute path, so a command that names it works from any folder."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    return uri


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an error's message (MLflow's store errors go on with the SQL statement), cut to ``limit``."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def store_error(tracking_uri: str, error: BaseException) -> ConfigError:
    """The one-line report of a store that cannot be used at start-up (nothing has run yet, so nothing is lost)."""
    if "_alembic_tmp_" in str(error):  # MLflow's schema migration was cut (a store from before create_sqlite_store)
        return ConfigError(f"MLflow store {absolute_uri(tracking_uri)} was left half-created by a run killed while "
                           "MLflow created it (it holds no runs): delete it and run again")
    return ConfigError(f"MLflow store {absolute_uri(tracking_uri)} cannot be used ({first_line(error)}): check its "
                       "permissions and free space, log elsewhere with --trainer.logger.init_args.tracking_uri "
                       "sqlite:///<folder>/mlflow.db, or run without tracking with --trainer.logger false")


def check_server(tracking_uri: str, timeout: float = SERVER_TIMEOUT_S) -> None:
    """Fail fast, with :class:`~sun_lightning.errors.ConfigError`, if the tracking server does not answer.

    MLflow retries a refused connection for minutes before it raises; this asks once. Any HTTP answer
    (even 401 or 404) or a TLS handshake counts as reachable: MLflow reports those itself. The request runs
    in a daemon thread so that a slow DNS lookup, which ``urlopen``'s timeout does not cover, cannot hold
    the start longer than ``timeout`` either.
    """
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=timeout).close()
            outcome.append(None)
        except urllib.error.HTTPError:
            outcome.append(None)
        except urllib.error.URLError as error:
            outcome.append(None if isinstance(error.reason, ssl.SSLError) else error)
        except (OSError, ValueError) as error:  # timeouts, resets, a malformed URI
            outcome.append(error)

    thread = threading.Thread(target=probe, daemon=True, name="mlflow-server-check")
    thread.start()
    thread.join(timeout)
    error = outcome[0] if outcome else TimeoutError(f"no answer in {timeout:g} s")
    if error is not None:
        reason = getattr(error, "reason", error)
        raise ConfigError(f"MLflow tracking server {tracking_uri} is unreachable ({first_line(reason)}): start it, "
                          f"or log to the local store with {LOCAL_STORE_OPTION}")


#: MLflow's own wait for a locked sqlite file (``PRAGMA busy_timeout`` in ``mlflow/store/db/utils.py``).
SQLITE_BUSY_TIMEOUT_S = 20.0


def check_sqlite(database: Path) -> None:
    """Open a sqlite store and write to it once, rolled back: ``sqlite3.OperationalError`` if it cannot be used.

    MLflow retries a file it cannot open ten times, for about 100 s, before it raises; this fails at once on a
    file that cannot be opened or written (read-only, a folder where its journal goes) and after MLflow's busy
    timeout on a locked one. The write sets the header's ``user_version`` to its own value.
    """
    connection = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(f"PRAGMA user_version = {int(version)}")
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def create_sqlite_store(database: Path) -> None:
    """Create MLflow's schema in ``<database>.init-<pid>-<id>`` and rename it into place: a run killed while MLflow
    migrates a fresh store (a dozen Alembic steps, a few seconds) leaves no half-migrated ``database``, which
    MLflow could never open again (``table _alembic_tmp_... already exists``)."""
    database = database.resolve()
    for stale in database.parent.glob(database.name + ".init*"):  # a killed creator's (callers hold the store's lock)
        stale.unlink(missing_ok=True)
    # A name of its own: MLflow caches a store per URI, and a second store created in the same process under a
    # name used before would reach the first one's (renamed) file.
    part = database.with_name(f"{database.name}.init-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    mlflow.MlflowClient(f"sqlite:///{part}").search_experiments(max_results=1)  # creates and migrates the schema
    os.replace(part, database)


def prepare_store(tracking_uri: str, experiment: str, artifact_location: str | None = None) -> None:
    """Check the tracking store before a run uses it; create a sqlite store and its experiment once, under a file lock.

    Runs started together on a fresh store (a comparison with ``--jobs 2``)
    otherwise race: both create the schema (one fails inside MLflow's
    migrations) or both create the experiment (one fails on the unique name).
    A store that cannot be used (unwritable, not a database) and a tracking
    server that does not answer raise :class:`~sun_lightning.errors.ConfigError`
    (one line, exit code 2), instead of a traceback or minutes of HTTP retries.
    Other tracking URIs are left to MLflow.
    """
    if is_server(tracking_uri):
        limit_http_retries()
        check_server(tracking_uri)
        return
    if not tracking_uri.startswith("sqlite:///"):
        return
    database = Path(tracking_uri.removeprefix("sqlite:///"))
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        with open(database.with_name(database.name + ".lock"), "w") as lock, quiet_store_logs():
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not database.exists() or database.stat().st_size == 0:
                create_sqlite_store(database)
            check_sqlite(database)
            client = mlflow.MlflowClient(tracking_uri)
            found = client.get_experiment_by_name(experiment)
            if found is None:
                client.create_experiment(experiment, artifact_location=artifact_location)
    except Exception as error:  # OSError, sqlite3's, MLflow's, SQLAlchemy's: all mean "this store cannot be used"
        raise store_error(tracking_uri, error) from error
    if found is not None and found.lifecycle_stage == "deleted":
        raise ConfigError(
            f"MLflow experiment {experiment!r} of {absolute_uri(tracking_uri)} is deleted (its runs are kept until "
            f"`mlflow gc`): restore it with `MLFLOW_TRACKING_URI={absolute_uri(tracking_uri)} mlflow experiments "
            f"restore --experiment-id {found.experiment_id}`, or log to another experiment (the comparison "
            "runner's --experiment, fit's --trainer.logger.init_args.experiment_name)")


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


def worked_out_bounds(params: dict[str, str], goal_space) -> dict[str, str]:
    """``params`` with ``data.goal.low``/``high`` given as ``auto`` replaced by the bounds worked out from the maze's
    map (``goal_space``'s): what the run's metrics bin, as numbers a reader can compare between runs."""
    found = {side: getattr(goal_space, side) for side in ("low", "high") if params.get(f"data.goal.{side}") == "auto"}
    return {**params, **{f"data.goal.{side}": str([float(v) for v in values]) for side, values in found.items()}}


# ---- comparisons -------------------------------------------------------------------------------
def comparison_parent(client: mlflow.MlflowClient, experiment: str, env_id: str | None, title: str | None = None) -> str:
    """The id of the comparison's parent run in ``experiment``: the newest one there, else a new one.

    One parent per experiment, so a resumed comparison (``--report-only``, or a second invocation
    that runs the missing seeds) nests all its runs under one parent and overwrites its report.

    Args:
        env_id: the environment compared; ``None`` for a study of several (named ``title``).
        title: the new parent's name; ``None``: ``<env>-comparison``.
    """
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    parents = client.search_runs([experiment_id], filter_string=f"tags.{KIND_TAG} = 'comparison'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if parents:
        return parents[0].info.run_id
    about = {"env": env_name(env_id), "env_id": env_id} if env_id else {}
    run = client.create_run(experiment_id, run_name=title or f"{env_name(env_id)}-comparison",
                            tags={KIND_TAG: "comparison", **about, "git_commit": git_commit()})
    return run.info.run_id
