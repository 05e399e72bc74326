"""Wall-clock cost of one goal-reaching evaluation on the continuous-control environments.

For each environment: the evaluation goals (at most ``--max-goals``, as ``eval.max_goals``) pursued for one
horizon by the actor of an untrained TD3 learner of the configs' default size (an untrained actor rarely
reaches a goal, so every goal runs its whole horizon: the worst case), on the CPU with the process's torch
threads; the best of ``--repeat`` evaluations (the machine is shared), after one warm-up evaluation.

    python bench/bench_eval.py
    python bench/bench_eval.py --envs PointMazeS-v0 AntMazeS-v0 --repeat 3
"""

from __future__ import annotations

import argparse
import time

import torch

import sun_lightning.envs  # noqa: F401
from sun_lightning.envs.eval_goals import eval_goals
from sun_lightning.envs.registry import goal_space
from sun_lightning.metrics.evaluation import GoalEvaluator, policy_of
from sun_lightning.learners.td3 import TD3SVF

ENVS = ("PointMazeS-v0", "PointMazeH-v0", "AntMazeS-v0", "AntMazeH-v0", "ArmPushH-v0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--max-goals", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}")
    print(f"{'env':16s} {'goals':>5s} {'horizon':>7s} {'env steps':>9s} {'seconds':>8s} {'success':>7s}")
    for name in args.envs:
        env_id = f"sun_lightning/{name}"
        torch.manual_seed(0)
        learner = TD3SVF(goal_space(env_id)).eval()
        evaluator = GoalEvaluator(env_id, eval_goals(env_id).subset(args.max_goals))
        act = policy_of(learner, learner.goal_space, uses_goals=True)
        with torch.no_grad():
            result = evaluator.run(act)  # warm-up (and the env's construction)
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                result = evaluator.run(act)
                best = min(best, time.perf_counter() - start)
        evaluator.close()
        n = len(result.reached)
        steps = int(torch.where(result.reached, result.steps, evaluator.horizon).sum())
        print(f"{name:16s} {n:5d} {evaluator.horizon:7d} {steps:9d} {best:8.2f} {result.metrics()['eval/success']:7.3f}")


if __name__ == "__main__":
    main()
