"""Env frames/s of SUN adaptive, DISCOVER and AdaGoal on the same config and budget, each a full ``fit``.

The paper reports SUN 3.4–3.5× faster than both on gridworlds and classic control (appendix "Source
Code, Compute Details, and Runtimes"): the ensemble baselines train and query four critics.

Usage: python bench/bench_methods.py [--config conf/four_room_stuck.yaml] [--frames 400] [--warmup 2000]
"""

from __future__ import annotations

import argparse

from bench_training_loop import ROOT, run_once

from sun_lightning.methods import method_args

NAMES = {"SUN adaptive": "sun", "DISCOVER": "discover", "AdaGoal": "adagoal"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/four_room_stuck.yaml")
    parser.add_argument("--frames", type=int, default=400, help="learning frames timed per method")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    fps = {}
    for name, method in NAMES.items():
        out = run_once(ROOT, args.config, args.warmup, args.frames, args.threads, list(method_args(method, ROOT / args.config)))
        fps[name] = out["frames"] / out["seconds"]
    print(f"\n{args.config}: {args.frames} learning frames after {args.warmup} warm-up frames")
    for name, value in fps.items():
        print(f"{name:<14s} {value:8.1f} env frames/s   SUN / {name} = {fps['SUN adaptive'] / value:.2f}x")


if __name__ == "__main__":
    main()
