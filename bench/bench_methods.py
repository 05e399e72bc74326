"""Env frames/s of SUN adaptive, DISCOVER and AdaGoal on the same config and budget, each a full ``fit`` in a
process of its own, the methods alternated round by round so that the machine's drift hits all alike.

The paper reports SUN 3.54× faster than AdaGoal and 3.43× faster than DISCOVER on gridworlds and classic
control (appendix "Source Code, Compute Details, and Runtimes"): the ensemble baselines train and query four
critics.

Usage: python bench/bench_methods.py [--configs conf/three_room.yaml conf/mountain_car.yaml] [--frames 600]
       [--warmup 2000] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import statistics

from bench_training_loop import ROOT, run_once

from sun_lightning.methods import method_args

NAMES = {"SUN adaptive": "sun", "DISCOVER": "discover", "AdaGoal": "adagoal"}
PAPER = {"DISCOVER": 3.43, "AdaGoal": 3.54}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["conf/three_room.yaml", "conf/mountain_car.yaml"])
    parser.add_argument("--frames", type=int, default=600, help="learning frames timed per run")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for config in args.configs:
        fps: dict[str, list[float]] = {name: [] for name in NAMES}
        for r in range(args.rounds):
            for name, method in NAMES.items():
                out = run_once(ROOT, config, args.warmup, args.frames, args.threads,
                               list(method_args(method, ROOT / config)))
                fps[name].append(out["frames"] / out["seconds"])
                print(f"{config} round {r + 1} {name:<13s} {fps[name][-1]:7.1f} env frames/s", flush=True)
        median = {name: statistics.median(values) for name, values in fps.items()}
        print(f"\n{config}: {args.frames} learning frames after {args.warmup} warm-up frames, {args.threads} threads, "
              f"median of {args.rounds} alternated rounds, {cpu_name()}")
        for name, value in median.items():
            ratio = median["SUN adaptive"] / value
            paper = f" (paper {PAPER[name]:.2f}x)" if name in PAPER else ""
            print(f"  {name:<13s} {value:8.1f} env frames/s   SUN / {name} = {ratio:.2f}x{paper}")
        print()


if __name__ == "__main__":
    main()
