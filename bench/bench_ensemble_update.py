"""Milliseconds per DQN-variant update, the single critic against the 4-critic ensemble, on batches of the
paper's size (16 sequences × 16 steps × 4 relabellings × 2 = 2048 rows per critic) drawn from a ThreeRoom
or MountainCar replay of uniformly random actions; optionally this code against another tree's.

Usage: python bench/bench_ensemble_update.py [--env sun_lightning/ThreeRoom-v0] [--updates 30] [--threads 2]
       [--baseline PATH_OF_ANOTHER_TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(env_id: str, updates: int, threads: int) -> dict[str, float]:
    """ms per update of DQNSVF and EnsembleDQNSVF (its torch path and, where built, its native kernel)."""
    import gymnasium
    import torch

    import sun_lightning.envs  # noqa: F401
    from sun_lightning import keys
    from sun_lightning.envs.registry import goal_space
    from sun_lightning.learners.dqn import DQNSVF
    from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF
    from sun_lightning.replay.storage import GoalReplayStorage

    torch.set_num_threads(threads)
    space, num_envs, steps = goal_space(env_id), 4, 2500
    storage = GoalReplayStorage(space, num_envs, num_envs * steps)
    env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                             vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP})
    obs, _ = env.reset(seed=0)
    rng = torch.Generator().manual_seed(0)
    seen = []
    for _ in range(steps):
        action = torch.randint(space.num_actions, (num_envs,), generator=rng)
        nxt, _, term, trunc, info = env.step(action.numpy())
        final = torch.as_tensor(obs, dtype=torch.float32).clone()
        nxt_t = torch.as_tensor(nxt, dtype=torch.float32)
        ended = torch.as_tensor(term | trunc)
        if ended.any():
            rows = ended.nonzero().squeeze(1)
            nxt_t[rows] = torch.as_tensor([info["final_obs"][int(i)] for i in rows], dtype=torch.float32)
        storage.extend({keys.OBS: final, keys.ACTION: action, keys.NEXT_OBS: nxt_t,
                        keys.TERMINATED: torch.as_tensor(term), keys.EPISODE_END: ended})
        seen.append(final)
        obs = nxt
    # the "radius" reach rule's standardization (SPEC §4): the stored goals' std, at least the median's
    std = space.project(torch.cat(seen)).std(0)
    scale = torch.where(std > 0, std.clamp(min=float(std.median())), torch.ones_like(std))
    out = {}
    for name, cls, backend in (("single (native)", DQNSVF, "auto"), ("single (torch)", DQNSVF, "torch"),
                               ("ensemble of 4", EnsembleDQNSVF, "auto")):
        torch.manual_seed(0)
        learner = cls(space, backend=backend)
        opt = learner.configure_optimizers()
        # the learner's own update, outside a Trainer: its optimizer as configured, a plain backward
        learner.optimizers = lambda opt=opt: opt
        learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
        sampler = learner.make_sampler()
        count = learner.batches_per_update
        batches = [sampler.sample(storage, scale, count=count if count > 1 else None) for _ in range(updates + 3)]
        for batch in batches[:3]:
            learner.update(batch)
        start = time.perf_counter()
        for batch in batches[3:]:
            learner.update(batch)
        out[name] = (time.perf_counter() - start) / updates * 1e3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="sun_lightning/ThreeRoom-v0")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline", help="another tree of this repository (e.g. a git worktree of an earlier commit)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.env, args.updates, args.threads)))
        return
    trees = {"this code": ROOT} | ({"baseline": Path(args.baseline)} if args.baseline else {})
    for name, tree in trees.items():
        cmd = [sys.executable, str(ROOT / "bench" / Path(__file__).name), "--json", "--env", args.env,
               "--updates", str(args.updates), "--threads", str(args.threads)]
        proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(tree)), capture_output=True, text=True, check=True)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        single = result["single (native)"]
        print(f"{name:<10s} " + "  ".join(f"{k} {v:6.1f} ms" for k, v in result.items())
              + f"   ensemble / single (native) = {result['ensemble of 4'] / single:.2f}x")


if __name__ == "__main__":
    main()
