"""Training-loop throughput on ThreeRoom (issue: the vertical slice).

Prints env frames per second of the whole loop (collector, goal selection, pseudocounts, storage,
sampling and one update per frame, through Lightning) and of the update alone, and the time the
update spends in matrix products, two ways:

* inside ``sgemm_`` in the Q network's C path, timed there (:func:`sun_lightning.networks.rows.gemm_time`;
  the row blocks run their products on both threads at once, counted as thread-seconds over
  threads), plus any aten matmul the torch profiler sees (none on the C path);
* the same products (the network's whole products, as recorded by the C path) replayed alone
  through ``torch.mm``: what they cost as PyTorch runs them, alternated with updates so that
  machine-speed drift hits both alike.

Targets: update ≤ 1.5 × matmul time; loop ≤ 1.15 × the time spent in updates (both timed in one run).
The rest of the loop (loop minus updates) is split, in the same run, into the loop's own work (goal
selection, policy, the environment's step, replay writes, batch draws; :data:`STREAM_PARTS`), TorchRL's
collector machinery around it and Lightning's per-step machinery (the timers add ~1 µs per call).

Usage: python bench/bench_training_loop.py [--frames 3000] [--updates 200] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sun_lightning.cli import main
from sun_lightning.networks import rows

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


#: The loop's own work inside the stream, timed per part (``time_loop``): what the issue calls the rest
#: (selection, pseudocount, environment, storage), plus acting and the learning batches' draws.
STREAM_PARTS = ("goal selection", "policy", "environment", "replay writes", "batch draws")


def time_parts(dm, marks: dict[str, float]) -> None:
    """Wrap the stream's parts (:data:`STREAM_PARTS`) in timers that add to ``marks`` once ``"start"`` is in it.

    The environment's part is the gymnasium vector env's own ``step`` (TorchRL's wrapper around it counts as
    TorchRL's machinery); the goal selection's is the goal transform's ``_step`` and ``_reset``. Called once the
    DataModule has built them (its first frames), each wrapper an instance attribute over the bound method.
    """
    def timed(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if "start" in marks:
                    marks[label] += time.perf_counter() - start
        setattr(owner, name, wrapper)

    marks.update(dict.fromkeys(STREAM_PARTS, 0.0))
    timed(dm.transform, "_step", "goal selection")
    timed(dm.transform, "_reset", "goal selection")
    timed(dm.policy, "forward", "policy")
    timed(dm.env.base_env._env, "step", "environment")
    timed(dm, "record", "replay writes")
    timed(dm, "_learning_batches", "batch draws")


def time_loop(cli, warmup: int) -> tuple[float, int, float, int, float, dict[str, float]]:
    """Seconds and frames of the learning phase of a full ``trainer.fit``, the seconds and count of the
    learner updates inside it (timed in the same run, so that machine-speed drift between a loop
    measurement and a separate update measurement cannot skew the loop's overhead), the seconds
    spent inside the DataModule's stream (collection, replay writes, batch draws: the rest of the
    rest is Lightning's own per-step machinery), and the seconds of each of the stream's parts
    (:data:`STREAM_PARTS`; the stream's remainder is TorchRL's collector machinery)."""
    marks: dict[str, float] = {"in_updates": 0.0, "updates": 0, "in_stream": 0.0}
    dm, module = cli.datamodule, cli.model
    update, stream = module.update, dm.stream

    def timed_stream():
        inner = stream()
        while True:
            started, start = "start" in marks, time.perf_counter()  # (the first item comes after the warm-up)
            item = next(inner, None)
            if started:
                marks["in_stream"] += time.perf_counter() - start
            if item is None:
                return
            yield item

    def on_frames(frames: int) -> None:
        if "goal selection" not in marks:  # (the DataModule's first frames: its parts exist now)
            time_parts(dm, marks)
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
    module.update, dm.stream = timed_update, timed_stream
    try:
        cli.trainer.fit(module, datamodule=dm)
    finally:
        del module.update, dm.stream
    return (marks["end"] - marks["start"], int(marks["frames1"] - marks["frames0"]), marks["in_updates"], marks["updates"],
            marks["in_stream"], {part: marks[part] for part in STREAM_PARTS})


def time_updates(module, dm, updates: int) -> tuple[float, float, int]:
    """Seconds per update (sampling excluded; the module's own ``update``, as in the loop), and the
    seconds per update spent in matrix products with their count: the BLAS ``sgemm_`` calls of the
    Q network's C path, timed inside it (:func:`sun_lightning.networks.rows.gemm_time`), plus any
    ``aten`` matmul the profiler sees in the update (none on the C path; all on the PyTorch path)."""
    batches = [dm.sampler.sample(dm.storage) for _ in range(16)]
    for i in range(10):
        module.update(batches[i % 16])
    rows.gemm_time(reset=True)
    start = time.perf_counter()
    for i in range(updates):
        module.update(batches[i % 16])
    per_update = (time.perf_counter() - start) / updates
    gemm_s, gemm_calls = rows.gemm_time(reset=True)
    n = min(updates, 50)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(n):
            module.update(batches[i % 16])
    events = prof.key_averages()
    aten_mm_us = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    print("\nTop ops in the update (self CPU, per update; ctypes calls count in their caller's record_function):")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(f"  {e.key:<40s} {e.self_cpu_time_total / n / 1e3:7.3f} ms  ({e.count // n} calls)")
    return per_update, gemm_s / updates + aten_mm_us / n / 1e6, gemm_calls // updates


def matmul_replay(module, dm, rounds: int = 20) -> tuple[float, float]:
    """Wall seconds per update of the update's matrix products alone, replayed through ``torch.mm`` on
    fresh tensors of the recorded shapes, and of the update itself, alternated in blocks of 10
    (machine-speed drift hits both alike): an independent check of the timed ``sgemm_`` calls."""
    batches = [dm.sampler.sample(dm.storage) for _ in range(16)]
    rows.gemm_time(reset=True)
    rows.gemm_shapes(record=True)
    module.update(batches[0])
    shapes = rows.gemm_shapes(record=False)
    calls = []
    for ta, tb, m, n, k in shapes:
        a = torch.randn(k, m).t() if ta else torch.randn(m, k)
        b = torch.randn(n, k).t() if tb else torch.randn(k, n)
        calls.append((a, b))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:  # the PyTorch path's products
        module.update(batches[0])
    for e in prof.events():
        if e.name in ("aten::mm", "aten::addmm", "aten::addmm_"):
            shape_a, shape_b = e.input_shapes[:2] if e.name == "aten::mm" else e.input_shapes[1:3]
            calls.append((torch.randn(shape_a), torch.randn(shape_b)))

    def replay() -> None:
        for a, b in calls:
            torch.mm(a, b)

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
    loop_s, frames, in_updates_s, loop_updates, in_stream_s, parts = time_loop(cli, args.warmup)
    module, dm = cli.model, cli.datamodule
    per_update, matmul, gemm_calls = time_updates(module, dm, args.updates)
    replay_mm, replay_update = matmul_replay(module, dm)
    per_sample = sample_time(dm)
    per_frame = loop_s / frames
    rest = loop_s - in_updates_s

    print(f"\n{args.env}, {args.num_envs} envs, torch threads {torch.get_num_threads()}, {dm.sampler.rows} rows per update")
    print(f"whole loop           : {frames / loop_s:8.1f} env frames/s  ({per_frame * 1e3:.2f} ms per frame, 1 update per frame)")
    print(f"update alone         : {1 / per_update:8.1f} updates/s     ({per_update * 1e3:.2f} ms)")
    print(f"  in sgemm_ (C path) : {matmul * 1e3:8.2f} ms ({gemm_calls} calls, row blocks on both threads) "
          f"-> update / matmul = {per_update / matmul:.2f} (target <= 1.5)")
    print(f"  the same products through torch.mm: {replay_mm * 1e3:.2f} ms vs the update alternated with them "
          f"{replay_update * 1e3:.2f} ms -> update / matmul = {replay_update / replay_mm:.2f} (target <= 1.5)")
    print(f"batch sampling       : {per_sample * 1e3:8.2f} ms per batch ({dm.num_envs} per draw, as in the loop)")
    print(f"in the loop          : {loop_updates} updates, {in_updates_s / loop_updates * 1e3:.2f} ms each; "
          f"the rest of the loop {rest / frames * 1e3:.2f} ms per frame")
    print(f"rest of loop / update: {rest / in_updates_s * 100:8.1f} %  (target <= 15 %; both timed in the loop)")
    print(f"  of the rest, batch sampling is ~{per_sample * loop_updates / rest * 100:.0f} %")
    print(f"  the DataModule's stream (collection, replay writes, batch draws): {in_stream_s / frames * 1e3:.2f} ms per frame; "
          f"Lightning's own per-step machinery: {(rest - in_stream_s) / frames * 1e3:.2f} ms per frame")
    work = sum(parts.values())
    print("  the stream's parts, ms per frame: " + ", ".join(f"{k} {v / frames * 1e3:.3f}" for k, v in parts.items())
          + f"; TorchRL's collector machinery (the stream's remainder) {(in_stream_s - work) / frames * 1e3:.3f}")
    print(f"  the loop's own work (those parts) / update: {work / in_updates_s * 100:.1f} %; the frameworks' machinery "
          f"(TorchRL's collector and Lightning's step) / update: {(rest - work) / in_updates_s * 100:.1f} %")

if __name__ == "__main__":
    main_bench()
