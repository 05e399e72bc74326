"""Whole-run env frames/s and learner updates/s of one process against a 2-process DDP run.

Each run is an ordinary ``python -m sun_lightning fit`` (gloo on CPU, or ``--accelerator gpu``), timed after
its warm-up by ``tests/system/ddp/ddp_probe.py``. One process gets all the threads (``--threads``); the DDP run
splits them between its processes. Under DDP an update is one synchronized optimizer step averaging one
batch per process, so "updates/s" counts those steps and "samples/s" the batches behind them.

Usage: python bench/bench_ddp.py [--configs three_room point_maze_s] [--frames 4000] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "system" / "ddp"
WARMUP = {"three_room": 5000, "point_maze_s": 1000}


def run(config: str, processes: int, frames: int, threads: int, accelerator: str) -> dict:
    """One fit of ``frames`` learning frames after the config's warm-up; rank 0's probe dump."""
    warmup = WARMUP.get(config, 2000)
    command = [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf" / f"{config}.yaml"),
               "--data.total_frames", str(warmup + frames), "--data.warmup_frames", str(warmup),
               "--metrics.log_every_frames", str(10**9), "--metrics.verbose", "false", "--trainer.logger", "false",
               "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
               "--trainer.callbacks+=ddp_probe.DumpState", "--trainer.accelerator", accelerator,
               "--trainer.devices", str(processes)]
    if processes > 1:
        command += ["--trainer.strategy", "ddp"]
    with tempfile.TemporaryDirectory() as cwd:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{PROBE}", SUN_DDP_PROBE=cwd,
                   OMP_NUM_THREADS=str(max(threads // processes, 1)))
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{config} with {processes} process(es) failed:\n{proc.stderr[-3000:]}")
        return torch.load(Path(cwd) / "rank0.pt", weights_only=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["three_room", "point_maze_s"])
    parser.add_argument("--frames", type=int, default=4000, help="learning frames timed per run (all processes)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the whole job")
    parser.add_argument("--processes", type=int, default=2, help="processes of the DDP run")
    parser.add_argument("--accelerator", default="cpu")
    args = parser.parse_args()
    print(f"{'config':<14s} {'processes':>9s} {'frames/s':>9s} {'updates/s':>10s} {'samples/s':>10s}")
    for config in args.configs:
        for processes in (1, args.processes):
            out = run(config, processes, args.frames, args.threads, args.accelerator)
            seconds = out["seconds"]
            fps, ups = out["timed_frames"] / seconds, out["timed_updates"] / seconds
            print(f"{config:<14s} {processes:>9d} {fps:9.1f} {ups:10.1f} {ups * processes:10.1f}", flush=True)


if __name__ == "__main__":
    main()
