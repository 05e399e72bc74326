"""Which runs a study has, and the ``fit`` command of one (SPEC §7).

A study is configs × methods × seeds. A method is a name of :data:`~sun_lightning.methods.METHODS` or a
grid variant: ``--grid data.rho=0.01,0.1,0.5`` adds the methods ``rho=0.01``, ``rho=0.1`` and
``rho=0.5``, each SUN adaptive with that override (the paper's pseudocount figure: SUN at several ρ
against ``--grid data.counts=binned``, the true counts). A run is named ``<env>-<method>-seed<k>``
(:func:`~sun_lightning.tracking.run_name`), the key a resumed study finds it by in MLflow, and its
checkpoints are ``checkpoints/<experiment>/<run name>/``.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from sun_lightning.checkpoints import run_folders
from sun_lightning.checkpoints.integrity import LAST
from sun_lightning.study.cores import describe
from sun_lightning.methods import method_args
from sun_lightning.tracking.naming import run_name

#: The paper's 14 environments (SPEC §6), in its order.
PAPER_CONFIGS = tuple(f"conf/{name}.yaml" for name in (
    "three_room", "four_room_stuck", "grid_maze", "mountain_car", "pendulum", "acrobot", "cart_pole",
    "lunar_lander", "lunar_lander_full", "point_maze_s", "point_maze_h", "antmaze", "antmaze_h", "arm_push_h"))
#: The paper's main comparison: SUN against its three baselines.
PAPER_METHODS = ("sun", "discover", "adagoal", "random")
#: The method grid variants start from (the configs' default).
GRID_BASE = "sun"
#: The folder of the package this runner imported: its runs import the same code (``PYTHONPATH``).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: an environment config, a method (its name and ``fit`` arguments) and a seed."""

    config: str
    env_id: str
    method: str
    seed: int
    method_args: tuple[str, ...]

    @property
    def name(self) -> str:
        return run_name(self.env_id, self.method, self.seed)


def config_env_id(config: str | Path) -> str:
    """The ``data.env_id`` of an environment config (what the runs' names and the report are about)."""
    env_id = (yaml.safe_load(Path(config).read_text()) or {}).get("data", {}).get("env_id")
    if not env_id:
        raise ValueError(f"{config} sets no data.env_id")
    return env_id


def parse_grid(items: list[str]) -> dict[str, tuple[str, ...]]:
    """Grid variants as methods: ``["data.rho=0.01,0.1"]`` → ``{"rho=0.01": ("--data.rho", "0.01"), ...}``.

    Raises:
        ValueError: an item that is not ``KEY=V1[,V2...]``.
    """
    variants: dict[str, tuple[str, ...]] = {}
    for item in items:
        key, _, values = item.partition("=")
        if not key or not values or key.startswith("-") or any(not v for v in values.split(",")):
            raise ValueError(f"--grid takes KEY=V1,V2,... (e.g. data.rho=0.01,0.1,0.5), got {item!r}")
        for value in values.split(","):
            variants[f"{key.rsplit('.', 1)[-1]}={value}"] = (f"--{key}", value)
    return variants


def plan(configs: list[str], methods: list[str], grid: dict[str, tuple[str, ...]], seeds: list[int],
         method_args=method_args) -> list[RunSpec]:
    """Every (config, method, seed) of a study, seeds outermost (an early look at the store has every method).

    Args:
        method_args: the method → ``fit`` arguments map (:func:`~sun_lightning.methods.method_args`).

    Raises:
        ValueError: a config without ``data.env_id``, or a method its learner cannot run.
    """
    env_ids = {config: config_env_id(config) for config in configs}
    specs = []
    for seed in seeds:
        for config in configs:
            for method in methods:
                specs.append(RunSpec(config, env_ids[config], method, seed, tuple(method_args(method, config))))
            for name, override in grid.items():
                base = tuple(method_args(GRID_BASE, config))
                specs.append(RunSpec(config, env_ids[config], name, seed, base + override))
    return specs


def signature_default(cls, name: str):
    """The default of a constructor argument (the one place defaults live: the signatures)."""
    return inspect.signature(cls.__init__).parameters[name].default


def budget_args(config: str | Path, scale: float) -> tuple[str, ...]:
    """``fit`` arguments that scale a config's budget by ``scale``: total and warm-up frames, the logging and
    checkpoint periods (whole vector steps, at least one); none for ``scale == 1``."""
    if scale == 1:
        return ()
    from sun_lightning.callbacks.exploration import ExplorationLogger  # torchrl: imported only when a budget is scaled
    from sun_lightning.exploration.config import DataConfig

    tree = yaml.safe_load(Path(config).read_text()) or {}
    data, metrics = tree.get("data") or {}, tree.get("metrics") or {}
    step = int(data.get("num_envs", signature_default(DataConfig, "num_envs")))

    def scaled(value) -> str:
        return str(max(step, round(float(value) * scale / step) * step))

    total = data.get("total_frames", signature_default(DataConfig, "total_frames"))
    warmup = data.get("warmup_frames", signature_default(DataConfig, "warmup_frames"))
    log = metrics.get("log_every_frames", signature_default(ExplorationLogger, "log_every_frames"))
    every = (tree.get("checkpoint") or {}).get("every_frames", 10_000)
    return ("--data.total_frames", scaled(total), "--data.warmup_frames", scaled(warmup),
            "--metrics.log_every_frames", scaled(log), "--checkpoint.every_frames", scaled(every))


def checkpoint_dir(experiment: str, name: str) -> Path:
    """Where a study's run keeps its checkpoints (relative to the study's folder)."""
    return Path("checkpoints") / experiment / name


def fit_args(spec: RunSpec, experiment: str, tracking_uri: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The arguments of ``python`` that run ``spec`` (without the interpreter: a Ray worker uses its own)."""
    return ["-m", "sun_lightning", "fit", "--config", spec.config, *spec.method_args,
            "--seed_everything", str(spec.seed),
            "--trainer.logger.init_args.experiment_name", experiment,
            "--trainer.logger.init_args.tracking_uri", tracking_uri,
            "--trainer.logger.init_args.run_name", spec.name,
            # explicit: a grid variant's selector names it like its base method, whose folder it must not share
            "--checkpoint.dirpath", str(checkpoint_dir(experiment, spec.name)),
            *extra]


def _die_with_parent() -> None:
    """In the child, before ``exec``: be killed when the process that started it dies (Linux), so a killed
    Ray worker or runner leaves no run behind writing to the store and the checkpoint its retry resumes from."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _resumed_file(folder: Path) -> Path:
    """What the log names as the checkpoint a run resumes from (``--ckpt_path last`` verifies it)."""
    return folder / LAST if (folder / LAST).is_file() else folder


def start_fit(args: list[str], ckpt_dir: Path, cwd: Path, log_path: Path, threads: int,
              attempt_note: str = "", environ: dict[str, str] | None = None,
              cpus: tuple[int, ...] = ()) -> tuple[subprocess.Popen, object, bool]:
    """Start one run in ``cwd`` as a child process, appending its output to ``log_path``.

    A run whose folder holds a checkpoint (an interrupted study, a Ray task retried after its worker died)
    continues from the newest intact one with ``--ckpt_path last``, in the same MLflow run (a fresh launch
    there would get a folder of its own: :mod:`sun_lightning.checkpoints.run_folders`).

    Args:
        environ: variables set for the run on top of this process's (its GPUs: ``CUDA_VISIBLE_DEVICES``).
        cpus: the cores the run is pinned to (its affinity mask; empty: not pinned).

    Returns:
        The process, the open log file and whether the run resumes.
    """
    folder = run_folders.newest_folder(cwd / ckpt_dir)[0]
    resumed = run_folders.has_checkpoints(folder)
    argv = [sys.executable, *args, *(("--ckpt_path", "last") if resumed else ())]
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=str(PACKAGE_ROOT) + (os.pathsep + path if path else ""), **(environ or {}))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a")
    gpus = f" on GPU {environ['CUDA_VISIBLE_DEVICES']}" if environ and "CUDA_VISIBLE_DEVICES" in environ else ""
    gpus += f" on {describe(cpus)}" if cpus else ""
    log.write(f"== {'resuming from ' + str(_resumed_file(folder).relative_to(cwd)) if resumed else 'starting'}"
              f"{gpus}{attempt_note}\n")
    log.flush()
    # A process group of its own: a terminal's Ctrl-C reaches the run through the runner, which passes it on and
    # waits for the run's checkpoint (sun_lightning.study.local), not beside the runner's own exit.
    def before_exec() -> None:
        _die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    process = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                               preexec_fn=before_exec if sys.platform == "linux" else None)
    return process, log, resumed
