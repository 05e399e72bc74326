"""A study's runs as Ray tasks (``--launcher ray``): Ray schedules them on a cluster; nothing is scheduled here.

Each run is one task holding ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs, which starts the run's ``fit``
as a child process in the study's folder (a shared file system on a cluster: the checkpoints and the logs
live there) and logs to the study's MLflow tracking URI (a tracking server on a cluster). When a worker dies
(a node lost, the process killed), its child dies with it and Ray retries the task, up to ``retries``
times; the retry continues the run from its last checkpoint (``--ckpt_path last``) in the same MLflow run,
so the run finishes once. A run stopped by SIGTERM or SIGINT on its node (a preemption, ``kill``) saves a
checkpoint and exits 143 or 130: retried the same way. A run that fails by itself (any other exit status ≠ 0)
is not retried.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

from sun_lightning.errors import stopping_signal
from sun_lightning.study.plan import PACKAGE_ROOT, RunSpec, checkpoint_dir, fit_args, start_fit

#: The one-line error of ``--launcher ray`` without Ray.
MISSING = "--launcher ray needs Ray, an optional extra: pip install -e \".[ray]\""


class FitKilled(RuntimeError):
    """The run's process was killed or stopped by a signal while its worker lived on (Ray retries the task)."""


def require_ray():
    """The ``ray`` module, or ``ImportError`` with :data:`MISSING`."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(MISSING) from error
    return ray


def run_task(args: list[str], ckpt_dir: str, cwd: str, log_path: str, threads: int) -> int:
    """The body of a run's task, on a worker: run ``fit`` to its end and return its exit status."""
    note = f" on {socket.gethostname()}, worker pid {os.getpid()}"
    process, log, _ = start_fit(args, Path(ckpt_dir), Path(cwd), Path(log_path), threads, note)
    try:
        code = process.wait()
    finally:
        log.close()
    if code < 0:
        raise FitKilled(f"killed by signal {-code}")
    if stopping_signal(code):
        raise FitKilled(f"stopped by {stopping_signal(code)} with a checkpoint")
    return code


def run_ray(specs: list[RunSpec], experiment: str, tracking_uri: str, extra: Callable[[RunSpec], tuple[str, ...]],
            log_dir: Path, address: str | None, cpus_per_run: float, gpus_per_run: float, threads: int,
            retries: int, on_finished: Callable[[str], None]) -> list[str]:
    """Submit every run of ``specs`` as a Ray task and wait for them all.

    Args:
        address: the cluster (``auto``, ``ray://host:port``); ``None`` starts a local one, unless this process
            is connected to one already (``ray.init`` was called).
        extra, on_finished: as :func:`~sun_lightning.study.local.run_local`'s.

    Returns:
        ``"<run name> (<why>, log <path>)"`` of every run that failed or whose task gave up.
    """
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    path = os.environ.get("PYTHONPATH")
    runtime_env = {"env_vars": {"PYTHONPATH": str(PACKAGE_ROOT) + (os.pathsep + path if path else "")}}
    task = ray.remote(run_task).options(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=retries,
                                        retry_exceptions=[FitKilled], runtime_env=runtime_env)
    cwd = Path.cwd()
    pending = {}
    for spec in specs:
        log_path = log_dir.resolve() / f"{spec.name}.log"
        ref = task.remote(fit_args(spec, experiment, tracking_uri, extra(spec)),
                          str(checkpoint_dir(experiment, spec.name)), str(cwd), str(log_path), threads)
        pending[ref] = (spec.name, log_path)
        print(f"submitted {spec.name} (log {log_path})", flush=True)
    failed = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        name, log_path = pending.pop(done[0])
        try:
            code = ray.get(done[0])
        except Exception as error:  # the task gave up: retries spent on dead workers or killed runs
            why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            failed.append(f"{name} ({type(error).__name__}: {why[:200]}, log {log_path})")
            print(f"{name} FAILED ({type(error).__name__})", flush=True)
            continue
        print(f"{name} {'finished' if code == 0 else f'FAILED (exit {code}, see {log_path})'}", flush=True)
        if code == 0:
            on_finished(name)
        else:
            failed.append(f"{name} (exit {code}, log {log_path})")
    return failed
