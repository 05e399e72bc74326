"""TD3 variant throughput (SPEC §5b): updates/s of the learner alone and whole-run frames/s of a config.

The update is timed on batches drawn from a PointMaze replay storage filled by random exploration
(paths to future goals up to T_max = 50 steps long, as in a run); the whole run is a full ``fit`` of
the config in a fresh process (``loop_driver.py``), learning phase only.

Usage: python bench/bench_td3.py [--config conf/point_maze_s.yaml] [--updates 30] [--frames 2000] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time

from bench_training_loop import ROOT, run_once


def time_updates(config: str, updates: int) -> tuple[float, float]:
    """Seconds per TD3 update and the mean path length of the future rows, on a storage of random walks."""
    import torch

    from sun_lightning.cli import main

    cli = main(["--config", str(ROOT / config), "--data.total_frames", "20000", "--data.warmup_frames", "20000", "--data.updates_per_frame", "0",
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.enable_model_summary", "false"], run=False)
    dm, learner = cli.datamodule, cli.model
    cli.trainer.fit(learner, datamodule=dm)  # all warm-up: fills D with random exploration, no update
    critic_opt, actor_opt = learner.configure_optimizers()
    learner.optimizers = lambda: (critic_opt, actor_opt)
    learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    batches = [dm.sampler.sample(dm.storage, dm.scale()) for _ in range(8)]
    for b in batches[:3]:
        learner.update(b)
    start = time.perf_counter()
    for i in range(updates):
        learner.update(batches[i % len(batches)])
    seconds = (time.perf_counter() - start) / updates
    future = torch.stack([b["future"] for b in batches])
    steps = torch.stack([b["path_valid"].sum(-1) for b in batches])[future].float().mean()
    return seconds, float(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/point_maze_s.yaml")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--frames", type=int, default=2000, help="learning frames of the whole-run measurement")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    seconds, steps = time_updates(args.config, args.updates)
    out = run_once(ROOT, args.config, 1000, args.frames, args.threads, [])
    print(f"{args.config}, {args.threads} threads")
    print(f"TD3 update (batch 256, mean future path {steps:.1f} steps): {seconds * 1000:.1f} ms, {1 / seconds:.1f} updates/s")
    print(f"whole run: {out['frames'] / out['seconds']:.1f} env frames/s, {out['updates'] / out['seconds']:.1f} updates/s")


if __name__ == "__main__":
    main()
