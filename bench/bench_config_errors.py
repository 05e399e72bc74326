"""How long each kind of config error takes to be told: ``python -m sun_lightning fit ...`` run as a user runs it
(a fresh interpreter, in an empty folder), its wall time from start to exit, and its one line.

Every kind a user can make in ``data``, ``model``, ``trainer`` and the callback groups is tried once (docs/faults.md
lists them). Those the pre-check tells (:mod:`sun_lightning.run.precheck`) come in well under 2 s on a quiet 2-core
machine; any left to the live parser would need its imports (torch, Lightning, MuJoCo: 10 s and more). The machine is
shared: each command is timed ``--repeat`` times and the fastest kept.

    python bench/bench_config_errors.py              # every kind, fastest of 2
    python bench/bench_config_errors.py --repeat 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREE_ROOM = str(ROOT / "conf" / "three_room.yaml")
POINT_MAZE = str(ROOT / "conf" / "point_maze_s.yaml")
MCC = str(ROOT / "conf" / "custom" / "mountain_car_continuous.yaml")
LIMIT_S = 2.0

#: (kind, the command's arguments after ``fit --config``)
KINDS = [
    ("data: unknown key", [THREE_ROOM, "--data.total_framez", "1"]),
    ("data: word for a number", [THREE_ROOM, "--data.num_envs", "x"]),
    ("data: outside its domain", [THREE_ROOM, "--data.total_frames", "0"]),
    ("data: run shorter than its warm-up", [THREE_ROOM, "--data.total_frames", "100"]),
    ("data: rho outside its domain", [POINT_MAZE, "--data.rho", "-1"]),
    ("data.goal: unknown key", [MCC, "--data.goal.reachh", "0.5"]),
    ("data.goal: word for a number", [MCC, "--data.goal.rho", "x"]),
    ("data.goal: reach outside its domain", [MCC, "--data.goal.reach", "-0.5"]),
    ("data.goal: low not below high", [MCC, "--data.goal.low", "[0.7, 0]"]),
    ("data.goal: bounds not numbers", [MCC, "--data.goal.low", "abc"]),
    ("data.env_id: unknown gymnasium id", [MCC, "--data.env_id", "MountainCarContinous-v0"]),
    ("data.env_id: gymnasium id without a goal space", [MCC, "--data.env_id", "CartPole-v1", "--data.goal", "null"]),
    ("data.env_id: unknown package id", [THREE_ROOM, "--data.env_id", "sun_lightning/ThreeRoomm-v0"]),
    ("data.layout: unknown symbol", [THREE_ROOM, "--data.env_id", "sun_lightning/Tiny-v0", "--data.layout", "S . X"]),
    ("data.goal.dims: outside the observation", [MCC, "--data.goal.dims", "[0, 5]"]),
    ("model: unknown key", [THREE_ROOM, "--model.init_args.lrr", "1"]),
    ("model: outside its domain", [THREE_ROOM, "--model.init_args.gamma", "1.5"]),
    ("model: learner that cannot act in the env", [MCC, "--model", "sun_lightning.learners.dqn.DQNSVF"]),
    ("trainer: unknown key", [THREE_ROOM, "--trainer.max_epochz", "3"]),
    ("checkpoint: outside its domain", [THREE_ROOM, "--checkpoint.every_frames", "0"]),
    ("checkpoint: word for a number", [POINT_MAZE, "--checkpoint.keep", "many"]),
    ("metrics: unknown key", [THREE_ROOM, "--metrics.log_every_framez", "10"]),
    ("results: unknown key", [THREE_ROOM, "--results.fractionz", "[1.0]"]),
    ("eval: unknown key", [THREE_ROOM, "--eval.every_framez", "10"]),
    ("progress: unknown key", [THREE_ROOM, "--progress.refreshz", "1"]),
]


def time_error(args: list[str], repeat: int) -> tuple[float, int, str]:
    """The fastest wall time of ``repeat`` runs, the exit code and the last line printed."""
    best, code, line = float("inf"), 0, ""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "sun_lightning", "fit", "--config", *args], cwd=folder,
                                  env=env, capture_output=True, text=True, timeout=300)
            best = min(best, time.perf_counter() - start)
        lines = [text for text in (proc.stderr + proc.stdout).splitlines() if text.strip()]
        code, line = proc.returncode, lines[-1] if lines else ""
    return best, code, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    repeat = parser.parse_args().repeat
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores (a quiet machine is below 0.5); fastest of {repeat}")
    slow = []
    for kind, args in KINDS:
        seconds, code, line = time_error(args, repeat)
        mark = "" if seconds < LIMIT_S else f"  > {LIMIT_S:.0f} s"
        print(f"{seconds:6.2f} s  exit {code}  {kind}{mark}\n          {line[:150]}", flush=True)
        if seconds >= LIMIT_S:
            slow.append(kind)
    print(f"{len(KINDS) - len(slow)} of {len(KINDS)} kinds under {LIMIT_S:.0f} s" +
          (f"; over it: {', '.join(slow)}" if slow else ""))


if __name__ == "__main__":
    main()
