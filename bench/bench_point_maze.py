"""Env steps per second of the batched point mazes (SPEC §6).

For PointMaze-S and PointMaze-H at 1, 64 and 1024 envs:

* ``kernel``: :meth:`MazeDynamics.move` alone on tensors;
* ``gym``: :meth:`PointMazeVectorEnv.step` with numpy actions (validation, horizon, SAME_STEP
  autoreset at the 100-step horizon, numpy outputs), as gymnasium and TorchRL call it;

each the best of ``--repeat`` runs of ``--steps`` steps (the machine is shared), on one torch thread.

    python bench/bench_point_maze.py
    python bench/bench_point_maze.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from sun_lightning.envs.point_maze import MAZES, MazeDynamics, PointMazeVectorEnv


def best_rate(fn, steps: int, repeat: int, num_envs: int, device: str) -> float:
    fn()  # warm-up
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        if device != "cpu":
            torch.cuda.synchronize()  # count the queued kernels, not only their launches
        best = min(best, time.perf_counter() - t0)
    return steps * num_envs / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'maze':<11} {'envs':>5} {'kernel steps/s':>15} {'gym steps/s':>13}")
    for name, (dim, *_rest) in MAZES.items():
        for n in (1, 64, 1024):
            actions = rng.uniform(-1, 1, size=(args.steps, n, dim)).astype(np.float32)
            dyn = MazeDynamics(name, args.device)
            a = torch.from_numpy(actions[0]).to(args.device)
            state = {"pos": torch.zeros(n, dim, device=args.device)}

            def kernel() -> None:
                state["pos"] = dyn.move(state["pos"], a)

            env = PointMazeVectorEnv(name, num_envs=n, device=args.device)
            env.reset(seed=0)
            it = iter(range(10**12))

            def gym_step() -> None:
                env.step(actions[next(it) % args.steps])

            kernel_rate = best_rate(kernel, args.steps, args.repeat, n, args.device)
            gym_rate = best_rate(gym_step, args.steps, args.repeat, n, args.device)
            print(f"{name:<11} {n:>5} {kernel_rate:>15,.0f} {gym_rate:>13,.0f}")


if __name__ == "__main__":
    main()
