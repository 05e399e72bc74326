"""TD3 variant throughput (SPEC §5b): one update of the single learner and of its 4-critic ensemble, in float32
and bf16 autocast, side by side; optionally whole-run frames/s of each precision.

The update is timed on batches drawn from the config's replay storage filled by random exploration
(paths to future goals up to T_max = 50 steps long, as in a run), at the paper's sizes (batch 256,
maxout 4 × 1024). The whole run is a full ``fit`` of the config in a fresh process (``loop_driver.py``),
learning phase only, with ``--trainer.precision`` set to each precision.

On CUDA each learner is timed eagerly and as CUDA graphs (``model.init_args.cuda_graph``), each
precision with its own capture.

Usage: python bench/bench_td3.py [--configs conf/point_maze_s.yaml conf/antmaze.yaml] [--updates 20]
       [--device cpu|cuda] [--threads 2] [--frames 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import nullcontext

from bench_training_loop import ROOT, run_once

PRECISIONS = ("32-true", "bf16-mixed")


def prepare(config: str, device: str):
    """A TD3 learner and its DataModule after a warm-up of random exploration (D filled, no update)."""
    from sun_lightning.run.cli import main

    cli = main(["--config", str(ROOT / config), "--data.total_frames", "20000", "--data.warmup_frames", "20000",
                "--data.updates_per_frame", "0", "--trainer.accelerator", "gpu" if device == "cuda" else "cpu",
                "--trainer.devices", "1", "--metrics.verbose", "false", "--trainer.logger", "false",
                "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false"], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli.model.to(cli.datamodule.exploration.storage.device), cli.datamodule.exploration  # (fit ends with the module on the CPU)


def standalone(learner, graph: bool = False):
    """The learner stepped outside the Trainer: its own (fresh) optimizers, a plain backward, its update eager
    or as CUDA graphs captured afresh."""
    learner.hparams.cuda_graph = graph
    opts = learner.configure_optimizers()
    learner.optimizers = lambda: opts
    learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    return learner


def time_updates(learner, run, updates: int, precision: str, device: str) -> float:
    """Median seconds per update (after the untimed ones that warm up and capture each plan) on 8 batches
    drawn from D, cycled."""
    import torch

    m = learner.batches_per_update
    batches = [run.sampler.sample(run.storage, run.scale(), count=m if m > 1 else None) for _ in range(8)]
    context = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if precision == "bf16-mixed" else nullcontext
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    untimed = 3 if learner._graphs is None else 3 + 2 * 3  # two plans, three warm-up calls each
    for i in range(updates + untimed):
        sync()
        start = time.perf_counter()
        with context():
            learner.update(batches[i % len(batches)])
        learner.flush_finite_checks()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times[untimed:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["conf/point_maze_s.yaml", "conf/antmaze.yaml"])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frames", type=int, default=0, help="learning frames of a whole-run measurement (0: none)")
    parser.add_argument("--compile", action="store_true", help="also time the single learner with compile_targets")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF
    from sun_lightning.learners.precision import bf16_units

    torch.set_num_threads(args.threads)
    print(f"device {args.device}, {args.threads} threads; bf16 matrix units: {bf16_units(args.device) or 'none'}")
    rows = []
    for config in args.configs:
        single, run = prepare(config, args.device)
        torch.manual_seed(0)
        hp = {k: v for k, v in single.hparams.items() if k != "goal_space" and not k.startswith("_")}
        ensemble = EnsembleTD3SVF(single.goal_space, **hp).to(single.device)
        ensemble.obs_stats.load_state_dict(single.obs_stats.state_dict())
        modes = ("eager", "graph") if args.device == "cuda" else ("eager",)
        for name, learner in (("single", single), ("ensemble of 4", ensemble)):
            for precision in PRECISIONS:
                for mode in modes:
                    ms = 1000 * time_updates(standalone(learner, mode == "graph"), run, args.updates, precision,
                                             args.device)
                    rows.append((config, name, precision, mode, ms))
                    print(f"{config:<24s} {name:<14s} {precision:<11s} {mode:<6s} {ms:8.2f} ms/update "
                          f"{1000 / ms:7.1f} updates/s", flush=True)
        if args.compile:
            single.hparams.compile_targets = True
            standalone(single)
            for precision in PRECISIONS:
                ms = 1000 * time_updates(single, run, args.updates, precision, args.device)
                print(f"{config:<24s} {'single, compiled targets':<14s} {precision:<11s} {ms:8.1f} ms/update", flush=True)
            single.hparams.compile_targets, single._compiled = False, None
        if args.frames:
            for precision in PRECISIONS:
                extra = ["--trainer.precision", precision]
                if args.device == "cuda":
                    extra += ["--trainer.accelerator", "gpu", "--trainer.devices", "1"]
                out = run_once(ROOT, config, 1000, args.frames, args.threads, extra)
                print(f"{config:<24s} whole run      {precision:<11s} {out['frames'] / out['seconds']:8.1f} env frames/s "
                      f"{out['updates'] / out['seconds']:7.1f} updates/s", flush=True)
    print("\nsummary (ms per update):")
    for config in args.configs:
        got = {(name, p, mode): ms for c, name, p, mode, ms in rows if c == config}
        for mode in modes:
            single32, single16 = got[("single", PRECISIONS[0], mode)], got[("single", PRECISIONS[1], mode)]
            ens32, ens16 = got[("ensemble of 4", PRECISIONS[0], mode)], got[("ensemble of 4", PRECISIONS[1], mode)]
            print(f"{config} {mode}: single fp32 {single32:.2f}, bf16 {single16:.2f} ({single32 / single16:.2f}x); "
                  f"ensemble fp32 {ens32:.2f}, bf16 {ens16:.2f} (ensemble / single in bf16: {ens16 / single16:.2f}x)")


if __name__ == "__main__":
    main()
