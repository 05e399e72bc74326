"""Env steps per second of ArmPush-H (SPEC §6): the batched vector env against a plain single-MjData loop.

One env step is 25 ``mj_step`` calls (0.05 s of simulation). Rows:

* ``plain mj_step``: one ``MjData``, per env step the action map and 25 ``mj_step`` calls, nothing else;
* ``plain env step``: the same plus ``mj_forward`` and the observation, what one world of the env computes;
* ``batch``: :meth:`ArmPushVectorEnv.step` (action check, one ``Batch.step`` call for all worlds, position and
  velocity stages at the new state, observation, SAME_STEP autoreset at the 250-step horizon) for 1, 8 and 64
  worlds on 1 and 2 threads.

Actions are uniform random in [-1, 1]^5, a new one every step (the arm sweeps around; the hand often hits the
plane, the cube rarely). Each figure is the best of ``--repeat`` runs of ``--seconds`` seconds at least (the
machine may be shared).

    python bench/bench_arm_push.py
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np

from sun_lightning.envs import arm_push as ap
from sun_lightning.envs.mujoco_vec import available_cpus


def best_rate(step, num_envs: int, seconds: float, repeat: int) -> float:
    """Best env steps/s over ``repeat`` runs, each of whole calls lasting at least ``seconds``."""
    step()  # warm-up
    best = 0.0
    for _ in range(repeat):
        calls, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            step()
            calls += 1
        best = max(best, calls * num_envs / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(4096, 64, ap.ACTION_DIM))
    print(f"ArmPush-H, {ap.FRAME_SKIP} mj_step per env step, {available_cpus()} CPUs available, "
          f"mujoco {mujoco.__version__}")
    print(f"{'variant':<16} {'worlds':>6} {'threads':>7} {'env steps/s':>12} {'mj_step/s':>10}")

    model = ap.build_model()
    data = mujoco.MjData(model)
    observer = ap.Observer(model)
    qpos, qvel, ctrl = ap.initial_state(1, rng)
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[0], qvel[0], ctrl[0]
    counter = iter(range(10**12))

    def plain_physics() -> None:
        ap.actions_to_ctrl(actions[next(counter) % 4096, 0], out=data.ctrl)
        for _ in range(ap.FRAME_SKIP):
            mujoco.mj_step(model, data)

    def plain_env() -> None:
        plain_physics()
        mujoco.mj_forward(model, data)
        observer.of_data(data)

    for name, fn in (("plain mj_step", plain_physics), ("plain env step", plain_env)):
        rate = best_rate(fn, 1, args.seconds, args.repeat)
        print(f"{name:<16} {1:>6} {1:>7} {rate:>12,.0f} {rate * ap.FRAME_SKIP:>10,.0f}")

    for n in (1, 8, 64):
        for threads in (1, 2):
            if threads > n:
                continue
            env = ap.ArmPushVectorEnv(num_envs=n, num_threads=threads)
            env.reset(seed=0)
            it = iter(range(10**12))

            def batch_step() -> None:
                env.step(actions[next(it) % 4096, :n])

            rate = best_rate(batch_step, n, args.seconds, args.repeat)
            print(f"{'batch':<16} {n:>6} {threads:>7} {rate:>12,.0f} {rate * ap.FRAME_SKIP:>10,.0f}")
            env.close()


if __name__ == "__main__":
    main()
