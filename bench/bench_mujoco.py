"""Env steps per second (world-steps/s) of the batched ant mazes (SPEC §6) against a plain MuJoCo loop.

For 1, 8 and 64 worlds of one maze model (AntMaze-H by default), each world-step being ``frame_skip`` (5)
``mj_step`` calls under random controls:

* ``loop``: one ``MjData`` per world, stepped one after another by ``mujoco.mj_step`` on this thread;
* ``batch``: :meth:`mujoco.batch.Batch.step` over all worlds with 1 and 2 threads (controls written,
  ``nstep = frame_skip``), the physics alone;
* ``env``: :meth:`AntMazeVectorEnv.step` with the same threads: action checks, state save for the
  height rule, observation and SAME_STEP autoreset included, as gymnasium and TorchRL call it;
* ``async`` (``--async``): the alternative, gymnasium's ``AsyncVectorEnv`` with one worker process per
  world (``gymnasium.make`` of the single env), for as many worlds as there are CPUs;

each the best of ``--repeat`` runs of about ``--world-steps`` world-steps (the machine may be shared),
with ``ratio = env / (threads x loop)``, the parallel efficiency against the single-thread loop (goal:
at least 0.8).

    python bench/bench_mujoco.py
    python bench/bench_mujoco.py --maze AntMazeS --world-steps 20000
    python bench/bench_mujoco.py --maze AntMazeS --worlds 16 64 --threads 1 8 16   # a many-core machine
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import mujoco
import mujoco.batch
import numpy as np

from sun_lightning.envs.ant_maze import FRAME_SKIP, MAZES, AntMazeVectorEnv, init_qpos, maze_model
from sun_lightning.envs.mujoco_vec import available_cpus

WORLDS = (1, 8, 64)
THREADS = (1, 2)


def best_rate(fn: Callable[[int], None], calls: int, repeat: int, worlds: int) -> float:
    """World-steps per second of ``calls`` calls of ``fn(k)`` (each stepping ``worlds`` worlds), best of ``repeat``."""
    fn(0)  # warm-up
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for k in range(calls):
            fn(k)
        best = min(best, time.perf_counter() - t0)
    return calls * worlds / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maze", default="AntMazeH", choices=sorted(MAZES))
    parser.add_argument("--world-steps", type=int, default=6000, help="world-steps per timed run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=list(WORLDS))
    parser.add_argument("--threads", type=int, nargs="+", default=list(THREADS))
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="also gymnasium's AsyncVectorEnv, one process per world (worlds <= CPUs)")
    args = parser.parse_args()
    model = maze_model(args.maze)
    rng = np.random.default_rng(0)
    stand = init_qpos(model)
    print(f"{args.maze}: {FRAME_SKIP} mj_step per world-step, integrator "
          f"{mujoco.mjtIntegrator(model.opt.integrator).name}, timestep {model.opt.timestep}")
    print(f"{'worlds':>6} {'loop':>8} {'threads':>7} {'batch':>8} {'env':>8} {'batch ratio':>11} {'env ratio':>9}")
    for n in args.worlds:
        calls = max(args.world_steps // n, 20)
        controls = rng.uniform(-1, 1, size=(min(calls, 500), n, model.nu))
        datas = [mujoco.MjData(model) for _ in range(n)]
        for d in datas:
            d.qpos[:] = stand

        def loop(k: int) -> None:
            u = controls[k % len(controls)]
            for d, ui in zip(datas, u):
                d.ctrl[:] = ui
                for _ in range(FRAME_SKIP):
                    mujoco.mj_step(model, d)

        loop_rate = best_rate(loop, calls, args.repeat, n)
        for threads in args.threads:
            batch = mujoco.batch.Batch(model, n, threads)
            batch.bind("qpos")[:] = stand
            ctrl = batch.bind("ctrl")

            def batch_step(k: int) -> None:
                ctrl[:] = controls[k % len(controls)]
                batch.step(nstep=FRAME_SKIP)

            env = AntMazeVectorEnv(args.maze, num_envs=n, num_threads=threads)
            env.reset(seed=0)

            def env_step(k: int) -> None:
                env.step(controls[k % len(controls)])

            batch_rate = best_rate(batch_step, calls, args.repeat, n)
            env_rate = best_rate(env_step, calls, args.repeat, n)
            loop_col = f"{loop_rate:>8,.0f}" if threads == args.threads[0] else " " * 8
            print(f"{n:>6} {loop_col} {threads:>7} {batch_rate:>8,.0f} {env_rate:>8,.0f} "
                  f"{batch_rate / (threads * loop_rate):>11.2f} {env_rate / (threads * loop_rate):>9.2f}")
            env.close()
        if args.use_async and n <= available_cpus():
            rate = async_rate(args.maze, n, controls, calls, args.repeat)
            print(f"{n:>6} async: {n} processes {rate:>8,.0f} world-steps/s "
                  f"(ratio {rate / (n * loop_rate):.2f})", flush=True)


def async_rate(maze: str, n: int, controls: np.ndarray, calls: int, repeat: int) -> float:
    """World-steps/s of gymnasium's AsyncVectorEnv over ``n`` single ant envs, one process each."""
    import gymnasium

    import sun_lightning.envs  # noqa: F401  (registers the ids)

    env = gymnasium.vector.AsyncVectorEnv([lambda: gymnasium.make(f"sun_lightning/{maze}-v0") for _ in range(n)])
    env.reset(seed=0)
    try:
        return best_rate(lambda k: env.step(controls[k % len(controls)]), calls, repeat, n)
    finally:
        env.close()


if __name__ == "__main__":
    main()
