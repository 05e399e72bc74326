"""A study's runs as local processes, ``jobs`` at a time (the default launcher of :mod:`sun_lightning.compare`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sun_lightning.study.plan import RunSpec, checkpoint_dir, fit_args, start_fit


def run_local(specs: list[RunSpec], experiment: str, tracking_uri: str, extra: Callable[[RunSpec], tuple[str, ...]],
              log_dir: Path, jobs: int, threads: int, on_finished: Callable[[str], None]) -> list[str]:
    """Run ``specs``, ``jobs`` at a time, in the current folder.

    Args:
        extra: the ``fit`` arguments added to a run's own (budget scaling, the arguments after ``--``).
        on_finished: called with each run's name when its process exits 0.

    Returns:
        ``"<run name> (exit <code>, log <path>)"`` of every run whose process failed.
    """
    queue, running, failed = list(specs), [], []
    while queue or running:
        while queue and len(running) < jobs:
            spec = queue.pop(0)
            log_path = log_dir / f"{spec.name}.log"
            process, log, resumed = start_fit(fit_args(spec, experiment, tracking_uri, extra(spec)),
                                              checkpoint_dir(experiment, spec.name), Path.cwd(), log_path, threads)
            running.append((spec.name, process, log, time.perf_counter()))
            print(f"{'resumed' if resumed else 'started'} {spec.name} (log {log_path})", flush=True)
        time.sleep(0.5)
        for entry in list(running):
            name, process, log, start = entry
            if process.poll() is None:
                continue
            running.remove(entry)
            log.close()
            status = "finished" if process.returncode == 0 else f"FAILED (exit {process.returncode}, see {log.name})"
            print(f"{name} {status} in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
            if process.returncode == 0:
                on_finished(name)
            else:
                failed.append(f"{name} (exit {process.returncode}, log {log.name})")
    return failed
