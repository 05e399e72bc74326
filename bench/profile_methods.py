"""Where an env frame's time goes, per method: SUN adaptive, DISCOVER and AdaGoal side by side on one config.

Each method runs a ``fit`` in a process of its own under cProfile, switched on after the warm-up; the table
gives milliseconds per learning frame (cumulative times of the functions that own each phase):

* env step: the vector env's ``step``; action selection: the acting policy's ``forward`` (ε-greedy on Q,
  the actor plus noise); goal selection: the goal transform's step (reselection checks and scoring);
* update: the learner's ``update``, split into the loss (forward, and on the CPU kernel path its backward
  too), autograd's backward and the optimizer step; batch draw: the sampler;
* replay: recording the step into D and the pseudocounts; logging: the exploration logger's callbacks;
* other: the rest (TorchRL's collector, Lightning's loop).

cProfile's own cost inflates Python-heavy phases; the totals are for comparing phases, ``bench_methods.py``
measures frames/s.

Usage: python bench/profile_methods.py [--config conf/three_room.yaml] [--frames 400] [--warmup 2000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"SUN adaptive": "sun", "DISCOVER": "discover", "AdaGoal": "adagoal"}
#: phase → (file suffix, function name) pairs whose cumulative times add up to it
PHASES = {
    "env step": [("envs/gridworlds.py", "step"), ("gymnasium/vector/sync_vector_env.py", "step"),
                 ("envs/point_maze.py", "step"), ("envs/mujoco_vec.py", "step")],
    "action selection": [("learners/policy.py", "forward")],
    "goal selection": [("goals/transform.py", "_step"), ("goals/transform.py", "_reset")],
    "update: loss": [("learners/dqn.py", "loss_and_stats"), ("learners/ensemble_dqn.py", "loss_and_stats"),
                     ("learners/td3.py", "critic_loss"), ("learners/ensemble_td3.py", "critic_loss"),
                     ("learners/td3.py", "actor_loss")],
    "update: backward": [("~", "<method 'run_backward' of 'torch._C._EngineBase' objects>")],
    "update: optimizer": [("torch/optim/adamw.py", "step"), ("torch/optim/adam.py", "step")],
    "batch draw": [("replay/hindsight.py", "sample"), ("replay/future.py", "sample")],
    "replay": [("exploration/recorder.py", "record")],
    "logging": [("callbacks/exploration.py", "on_train_batch_end"), ("callbacks/exploration.py", "_on_frames"),
                ("callbacks/results.py", "_on_frames"), ("callbacks/evaluation.py", "_on_frames")],
}


def profile(config: str, method: str, warmup: int, frames: int) -> dict[str, float]:
    """ms per learning frame of each phase, in this process."""
    import cProfile
    import pstats
    import time

    from sun_lightning.methods import method_args
    from sun_lightning.run.cli import main as cli_main

    args = ["--config", config, "--data.total_frames", str(warmup + frames), "--data.warmup_frames", str(warmup),
            "--metrics.log_every_frames", str(frames), "--metrics.verbose", "false", "--trainer.logger", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.enable_model_summary", "false",
            "--trainer.enable_progress_bar", "false", *method_args(method, Path(config))]
    cli = cli_main(args, run=False)
    profiler, mark = cProfile.Profile(), {}

    def on_frames(n: int) -> None:
        if n >= warmup and not mark:
            mark.update(start=time.perf_counter(), frames=n)
            profiler.enable()

    cli.datamodule.events.subscribe("frames", on_frames)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    profiler.disable()
    total = time.perf_counter() - mark["start"]
    learned = cli.datamodule.exploration.frames - mark["frames"]
    stats = pstats.Stats(profiler).stats
    out = {}
    for phase, owners in PHASES.items():
        seconds = sum(cumulative for (path, _, name), (_, _, _, cumulative, _) in stats.items()
                      if any(path.endswith(suffix) and name == function for suffix, function in owners))
        out[phase] = 1e3 * seconds / learned
    out["other"] = 1e3 * total / learned - sum(out.values())
    out["total"] = 1e3 * total / learned
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/three_room.yaml")
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--method", help=argparse.SUPPRESS)  # one method, in this process
    args = parser.parse_args()
    if args.method:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(profile(str(ROOT / args.config), args.method, args.warmup, args.frames)))
        return
    rows = {}
    for name, method in NAMES.items():
        cmd = [sys.executable, __file__, "--config", args.config, "--frames", str(args.frames), "--warmup",
               str(args.warmup), "--threads", str(args.threads), "--method", method]
        proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, check=True)
        rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    phases = list(next(iter(rows.values())))
    print(f"{args.config}: ms per learning frame ({args.frames} frames after {args.warmup} warm-up, {args.threads} threads, under cProfile)")
    print(f"| phase | {' | '.join(rows)} |\n|---|{'---|' * len(rows)}")
    for phase in phases:
        print(f"| {phase} | " + " | ".join(f"{rows[name][phase]:.1f}" for name in rows) + " |")


if __name__ == "__main__":
    main()
