"""Whole-run throughput of a config on this code and on a baseline commit, alternated in one run.

Each measurement is a full ``python -m sun_lightning fit`` in a fresh process (``loop_driver.py``):
env frames/s and learner updates/s of the learning phase (after the warm-up), everything included
(collection, goal selection, pseudocounts, replay, sampling, updates, Lightning). The baseline is
checked out into a temporary git worktree and imported from there; runs of the two alternate so that
the machine's speed drift hits both alike.

Usage: python bench/bench_training_loop.py [--baseline 0243e9f] [--rounds 3] [--frames 2000]
       [--warmup 5000] [--config conf/three_room.yaml] [--threads 2] [--this-args '...'] [-- fit arguments]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(tree: Path, config: str, warmup: int, frames: int, threads: int, extra: list[str]) -> dict:
    args = ["--config", str(tree / config), "--data.total_frames", str(warmup + frames),
            "--data.warmup_frames", str(warmup), "--metrics.log_every_frames", str(10**9),
            "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
            "--trainer.enable_model_summary", "false", *extra]
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "loop_driver.py"), str(warmup), *args],
                              cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"run in {tree} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["package"].startswith(str(tree)):
        raise RuntimeError(f"imported {out['package']}, not the code of {tree}")
    return out


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="0243e9f", help="commit to compare with (the one before the loop's rewrite)")
    parser.add_argument("--config", default="conf/three_room.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=2000, help="learning frames timed per run")
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--this-args", default="", help="fit arguments for this code only, e.g. "
                        "'--model.init_args.backend torch' (quoted; those after -- go to both)")
    args = parser.parse_args(argv)
    own = shlex.split(args.this_args)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.baseline],
                       check=True, capture_output=True)
        try:
            trees = {"baseline " + args.baseline: (base, extra), "this code": (ROOT, extra + own)}
            # untimed first runs: each tree builds its C kernels into the cache
            for tree, tree_args in trees.values():
                run_once(tree, args.config, args.warmup, 200, args.threads, tree_args)
            results: dict[str, list[dict]] = {name: [] for name in trees}
            for r in range(args.rounds):
                for name, (tree, tree_args) in trees.items():
                    out = run_once(tree, args.config, args.warmup, args.frames, args.threads, tree_args)
                    results[name].append(out)
                    print(f"round {r + 1} {name:<18s} {out['frames'] / out['seconds']:7.1f} frames/s "
                          f"{out['updates'] / out['seconds']:7.1f} updates/s  (whole process {out['total_seconds']:.1f} s)",
                          flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    print(f"\n{args.config}: {args.frames} learning frames after {args.warmup} warm-up frames, "
          f"{args.threads} threads, median of {args.rounds} alternated runs; this code with {own or 'its defaults'}")
    medians = {}
    for name, outs in results.items():
        fps = statistics.median(o["frames"] / o["seconds"] for o in outs)
        ups = statistics.median(o["updates"] / o["seconds"] for o in outs)
        medians[name] = fps
        print(f"{name:<18s} {fps:8.1f} env frames/s {ups:8.1f} updates/s")
    base_fps, this_fps = medians.values()
    print(f"this code / baseline: {this_fps / base_fps:.2f}x frames/s")


if __name__ == "__main__":
    main()
