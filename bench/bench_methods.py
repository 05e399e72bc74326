"""Env frames per second of SUN adaptive, DISCOVER and AdaGoal on the same env and budget (issue: selection rules).

The paper reports SUN 3.4–3.5× faster than both on gridworlds and classic
control (appendix "Source Code, Compute Details, and Runtimes"): the ensemble
baselines train and query four critics.

Usage: python bench/bench_methods.py [--config conf/four_room_stuck.yaml] [--frames 400]
"""

from __future__ import annotations

import argparse

from bench_training_loop import build, time_loop

from sun_lightning.methods import method_args

NAMES = {"SUN adaptive": "sun", "DISCOVER": "discover", "AdaGoal": "adagoal"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="conf/four_room_stuck.yaml")
    parser.add_argument("--frames", type=int, default=400, help="learning frames timed per method")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--num-envs", type=int, default=4)
    args = parser.parse_args()
    fps = {}
    for name, method in NAMES.items():
        cli = build(args.frames, args.warmup, "", args.num_envs, args.config, method_args(method))
        seconds, frames, _, _ = time_loop(cli, args.warmup)
        fps[name] = frames / seconds
    print(f"\n{args.config}: {args.frames} learning frames after {args.warmup} warm-up frames, {args.num_envs} envs")
    for name, value in fps.items():
        print(f"{name:<14s} {value:8.1f} env frames/s   SUN / {name} = {fps['SUN adaptive'] / value:.2f}x")


if __name__ == "__main__":
    main()
