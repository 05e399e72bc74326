"""Training-loop throughput on ThreeRoom (issue: the vertical slice).

Prints env frames per second of the whole loop (collector, goal selection,
pseudocounts, storage, sampling and one update per frame, through Lightning)
and of the update alone, and the time the update spends in matrix products
(torch profiler: self time of the matmul ops, per update), so the two targets can be read off:
update ≤ 1.5 × matmul time; loop ≤ 1.15 × the time spent in updates (both timed in one run).

Usage: python bench/bench_training_loop.py [--frames 3000] [--updates 200] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sun_lightning.cli import main

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::matmul", "aten::linear", "aten::_addmm_activation")


def build(frames: int, warmup: int, env: str, num_envs: int, config: str = "conf/three_room.yaml", extra: tuple[str, ...] = ()):
    """A LightningCLI (not yet fitted) of ``warmup + frames`` frames without logging or checkpoints."""
    args = [
        "--config", config,
        *(("--data.env_id", env) if env else ()),
        "--data.total_frames", str(warmup + frames),
        "--data.warmup_frames", str(warmup),
        "--data.num_envs", str(num_envs),
        "--metrics.log_every_frames", str(10**9),
        "--metrics.verbose", "false",
        "--trainer.logger", "false",
        "--trainer.enable_checkpointing", "false",
        "--trainer.enable_model_summary", "false",
        *extra,
    ]
    return main(args, run=False)


def time_loop(cli, warmup: int) -> tuple[float, int, float, int]:
    """Seconds and frames of the learning phase of a full ``trainer.fit``, and the seconds and
    count of the learner updates inside it (timed in the same run, so that machine-speed drift
    between a loop measurement and a separate update measurement cannot skew the loop's overhead)."""
    marks: dict[str, float] = {"in_updates": 0.0, "updates": 0}
    dm, module = cli.datamodule, cli.model
    update = module.update

    def on_frames(frames: int) -> None:
        if frames >= warmup and "start" not in marks:
            marks["start"], marks["frames0"] = time.perf_counter(), frames
        marks["end"], marks["frames1"] = time.perf_counter(), frames

    def timed_update(batch) -> None:
        start = time.perf_counter()
        update(batch)
        if "start" in marks:
            marks["in_updates"] += time.perf_counter() - start
            marks["updates"] += 1

    dm.frame_listeners.append(on_frames)
    module.update = timed_update
    try:
        cli.trainer.fit(module, datamodule=dm)
    finally:
        del module.update
    return marks["end"] - marks["start"], int(marks["frames1"] - marks["frames0"]), marks["in_updates"], marks["updates"]


def time_updates(module, dm, updates: int) -> tuple[float, float, float]:
    """Seconds per update (sampling excluded; the module's own ``update``, as in the loop), and the
    matmul seconds per update: measured directly, and as the matmul share of all profiled op time
    times the update time (that share leaves out Python time between ops)."""
    batches = [dm.sampler.sample(dm.storage) for _ in range(16)]
    for i in range(10):
        module.update(batches[i % 16])
    start = time.perf_counter()
    for i in range(updates):
        module.update(batches[i % 16])
    per_update = (time.perf_counter() - start) / updates
    n = min(updates, 50)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(n):
            module.update(batches[i % 16])
    events = prof.key_averages()
    matmul_us = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    total_us = sum(e.self_cpu_time_total for e in events)
    print("\nTop ops in the update (self CPU, per update):")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(f"  {e.key:<40s} {e.self_cpu_time_total / n / 1e3:7.3f} ms  ({e.count // n} calls)")
    return per_update, matmul_us / n / 1e6, matmul_us / total_us * per_update


def matmul_replay(module, dm, rounds: int = 20) -> tuple[float, float]:
    """Wall seconds per update of the update's matrix products alone, replayed on fresh tensors of
    the recorded shapes, and of the update itself, alternated in blocks of 10 (machine-speed
    drift hits both alike). Free of profiler overhead: the strict form of the matmul target."""
    batches = [dm.sampler.sample(dm.storage) for _ in range(16)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        module.update(batches[0])
    calls = []
    for e in prof.events():
        if e.name in ("aten::mm", "aten::addmm", "aten::addmm_"):
            args = [torch.randn(shape) for shape in e.input_shapes[: 2 if e.name == "aten::mm" else 3]]
            fn = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::addmm_": torch.Tensor.addmm_}[e.name]
            calls.append((fn, args))

    def replay() -> None:
        for fn, args in calls:
            fn(*args)

    for _ in range(10):
        replay()
    in_mm = in_update = 0.0
    for r in range(rounds):
        start = time.perf_counter()
        for _ in range(10):
            replay()
        in_mm += time.perf_counter() - start
        start = time.perf_counter()
        for i in range(10):
            module.update(batches[(10 * r + i) % 16])
        in_update += time.perf_counter() - start
    return in_mm / (10 * rounds), in_update / (10 * rounds)


def sample_time(dm, n: int = 100) -> float:
    """Seconds per learning batch, drawn as the loop draws them: one call per vector step."""
    start = time.perf_counter()
    for _ in range(n):
        dm.sampler.sample(dm.storage, count=dm.num_envs).unbind(0)
    return (time.perf_counter() - start) / (n * dm.num_envs)


def main_bench() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=3000, help="learning frames of the timed loop")
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--env", default="sun_lightning/ThreeRoom-v0")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cli = build(args.frames, args.warmup, args.env, args.num_envs)
    loop_s, frames, in_updates_s, loop_updates = time_loop(cli, args.warmup)
    module, dm = cli.model, cli.datamodule
    per_update, matmul, matmul_share = time_updates(module, dm, args.updates)
    replay_mm, replay_update = matmul_replay(module, dm)
    per_sample = sample_time(dm)
    per_frame = loop_s / frames
    rest = loop_s - in_updates_s

    print(f"\n{args.env}, {args.num_envs} envs, torch threads {torch.get_num_threads()}, {dm.sampler.rows} rows per update")
    print(f"whole loop           : {frames / loop_s:8.1f} env frames/s  ({per_frame * 1e3:.2f} ms per frame, 1 update per frame)")
    print(f"update alone         : {1 / per_update:8.1f} updates/s     ({per_update * 1e3:.2f} ms)")
    print(f"  of which matmuls   : {matmul * 1e3:8.2f} ms  -> update / matmul = {per_update / matmul:.2f} (target <= 1.5)")
    print(f"  (matmul share of the profiled op time x update time: {matmul_share * 1e3:.2f} ms -> {per_update / matmul_share:.2f})")
    print(f"  matmuls replayed alone, wall: {replay_mm * 1e3:.2f} ms vs the update alternated with them "
          f"{replay_update * 1e3:.2f} ms -> {replay_update / replay_mm:.2f}")
    print(f"batch sampling       : {per_sample * 1e3:8.2f} ms per batch ({dm.num_envs} per draw, as in the loop)")
    print(f"in the loop          : {loop_updates} updates, {in_updates_s / loop_updates * 1e3:.2f} ms each; "
          f"the rest of the loop {rest / frames * 1e3:.2f} ms per frame")
    print(f"rest of loop / update: {rest / in_updates_s * 100:8.1f} %  (target <= 15 %; both timed in the loop)")
    print(f"  of the rest, batch sampling is ~{per_sample * loop_updates / rest * 100:.0f} %")

if __name__ == "__main__":
    main_bench()
