"""A study's runs as local processes, ``jobs`` at a time (the default launcher of :mod:`sun_lightning.compare`).

Ctrl-C (or SIGTERM) on the runner is passed on to its running runs as one Ctrl-C each: every run saves a
checkpoint and stops (sun_lightning/callbacks/checkpoint.py), the runner waits for them and starts no new run, and the same
command resumes the study. A second Ctrl-C is passed on too and stops the runs at once. The runs live in
process groups of their own, so a terminal's Ctrl-C reaches them only through the runner, once.

A run stopped from outside the runner (``kill`` of its process, SIGTERM from the system) saves its checkpoint and
exits 130 or 143 (sun_lightning/__main__.py): the runner says so, with the frames the checkpoint holds, and stops the
study as it does on its own Ctrl-C, rather than counting the run finished and starting the next.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sun_lightning.checkpoints import run_folders
from sun_lightning.errors import stopping_signal
from sun_lightning.study.cores import CoreSlots, describe, usable_cpus
from sun_lightning.study.gpus import GpuSlots
from sun_lightning.study.plan import RunSpec, checkpoint_dir, fit_args, start_fit


class StudyInterrupted(Exception):
    """The runner was asked to stop; its running runs saved checkpoints and stopped.

    Args:
        stopped: the names of the runs that were running and stopped.
    """

    def __init__(self, stopped: list[str]) -> None:
        super().__init__(f"stopped {len(stopped)} run(s): {', '.join(stopped) or 'none'}")
        self.stopped = stopped


class _ForwardStop:
    """While active (main thread only), SIGINT and SIGTERM set :attr:`requests` and pass SIGINT to the runs."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, running: list) -> None:
        self.running, self.requests, self._previous = running, 0, {}

    def __enter__(self) -> "_ForwardStop":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _on_signal(self, signum, frame) -> None:
        self.request(signal.Signals(signum).name)

    def request(self, why: str) -> None:
        """Stop the study: no run starts any more, and each running run is passed one Ctrl-C."""
        self.requests += 1
        if self.requests == 1:
            print(f"\n{why}: each running run saves a checkpoint and stops; the same command "
                  "resumes the study (Ctrl-C again: stop them at once)", file=sys.stderr, flush=True)
        for _, process, *_ in self.running:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)


def _checkpoint_line(experiment: str, name: str) -> str:
    """Where a stopped run's checkpoint is, and how far it got (relative to the study's folder)."""
    folder = run_folders.newest_folder(Path.cwd() / checkpoint_dir(experiment, name))[0]
    frames = sorted(folder.glob("frames=*.ckpt")) if folder.is_dir() else []
    if not frames:
        return "with no checkpoint: the same command starts it again"
    return (f"checkpoint at {int(frames[-1].stem.split('=')[1])} frames in "
            f"{folder.relative_to(Path.cwd())}: the same command resumes it")


def run_local(specs: list[RunSpec], experiment: str, tracking_uri: str, extra: Callable[[RunSpec], tuple[str, ...]],
              log_dir: Path, jobs: int, threads: int, on_finished: Callable[[str], None],
              gpus: GpuSlots | None = None) -> list[str]:
    """Run ``specs``, ``jobs`` at a time, in the current folder.

    Args:
        extra: the ``fit`` arguments added to a run's own (budget scaling, the arguments after ``--``).
        on_finished: called with each run's name when its process exits 0.
        gpus: the GPUs to pack the runs onto (a run starts only when its share is free), or ``None``.

    Each running run is pinned to its own ``1/jobs`` of this process's cores (:mod:`~sun_lightning.study.cores`).

    Returns:
        ``"<run name> (exit <code>, log <path>)"`` of every run whose process failed.

    Raises:
        StudyInterrupted: after a Ctrl-C or SIGTERM, once the running runs have saved their checkpoints and stopped.
    """
    queue, running, failed, stopped = list(specs), [], [], []
    cores = CoreSlots(usable_cpus(), min(jobs, len(specs)) or 1)
    with _ForwardStop(running) as stop:
        while (queue and not stop.requests) or running:
            while queue and len(running) < jobs and not stop.requests:
                devices = gpus.acquire() if gpus else ()
                if devices is None:
                    break
                spec = queue.pop(0)
                log_path = log_dir / f"{spec.name}.log"
                cpus = cores.acquire()
                process, log, resumed = start_fit(fit_args(spec, experiment, tracking_uri, extra(spec)),
                                                  checkpoint_dir(experiment, spec.name), Path.cwd(), log_path, threads,
                                                  environ=GpuSlots.environment(devices) if devices else None, cpus=cpus)
                running.append((spec.name, process, log, time.perf_counter(), devices, cpus))
                where = (f" on GPU {','.join(devices)}" if devices else "") + (f" on {describe(cpus)}" if cpus else "")
                print(f"{'resumed' if resumed else 'started'} {spec.name}{where} (log {log_path})", flush=True)
            time.sleep(0.5)
            for entry in list(running):
                name, process, log, start, devices, cpus = entry
                if process.poll() is None:
                    continue
                running.remove(entry)
                log.close()
                cores.release(cpus)
                if devices:
                    gpus.release(devices)
                minutes = (time.perf_counter() - start) / 60
                signal_name = stopping_signal(process.returncode)
                if signal_name and not stop.requests:
                    stopped.append(name)
                    print(f"{name} stopped by {signal_name} after {minutes:.1f} min, "
                          f"{_checkpoint_line(experiment, name)}", flush=True)
                    on_finished(name)
                    stop.request(f"{name} was stopped by {signal_name}")
                    continue
                if stop.requests:
                    stopped.append(name)
                    print(f"{name} stopped (exit {process.returncode}) after {minutes:.1f} min", flush=True)
                    if process.returncode == 0 or signal_name:
                        on_finished(name)  # nests it under the study's parent run, finished or stopped
                    continue
                status = "finished" if process.returncode == 0 else f"FAILED (exit {process.returncode}, see {log.name})"
                print(f"{name} {status} in {minutes:.1f} min", flush=True)
                if process.returncode == 0:
                    on_finished(name)
                else:
                    failed.append(f"{name} (exit {process.returncode}, log {log.name})")
    if stop.requests:
        raise StudyInterrupted(stopped)
    return failed
