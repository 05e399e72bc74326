"""A scripted floor for the goal-reaching evaluation: head straight for the goal.

On the point mazes (SPEC §6) an action moves the position p by ``STEP_SCALE · a``, so the policy
a = (g − p) / max(STEP_SCALE, ‖g − p‖∞) moves along the straight line to g at full speed and lands on it.
It reaches every goal in line of sight of the start and none that needs a turn around a wall: the
evaluation success a learned goal-conditioned policy must beat before it can be said to navigate.
"""

from __future__ import annotations

import torch

from sun_lightning.envs.eval_goals import eval_goals
from sun_lightning.envs.point_maze import STEP_SCALE
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.metrics.evaluation import ActFn, GoalEvaluator


def straight_line(space: GoalSpace, step: float = STEP_SCALE) -> ActFn:
    """The policy a = (g − p) / max(step, ‖g − p‖∞) with p the state's goal projection.

    Raises:
        ValueError: where the action does not move the goal projection (discrete actions, or action and
            goal of different widths).
    """
    if space.discrete or space.action_dim != space.goal_dim:
        raise ValueError("a straight-line policy needs continuous actions that move the goal coordinates "
                         f"(action_dim {space.action_dim}, goal_dim {space.goal_dim})")

    def act(obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        gap = goal - space.project(obs)
        return gap / gap.abs().amax(-1, keepdim=True).clamp(min=step)

    return act


def straight_line_metrics(env_id: str, max_goals: int | None = 256, seed: int = 0) -> dict[str, float]:
    """The ``eval/*`` metrics of :func:`straight_line` on ``env_id``'s evaluation goals (as a run's evaluation
    with ``eval.max_goals`` and ``eval.seed``)."""
    evaluator = GoalEvaluator(env_id, eval_goals(env_id).subset(max_goals), seed)
    try:
        return evaluator.run(straight_line(evaluator.space)).metrics()
    finally:
        evaluator.close()


def straight_line_context(env_id: str, max_goals: int | None = 256, seed: int = 0) -> list[str]:
    """A report's line with the straight-line floor of ``env_id``'s evaluation, for the point mazes (whose
    actions move the goal coordinates by ``STEP_SCALE · a``); none for any other environment."""
    import gymnasium

    entry = str(gymnasium.spec(env_id).entry_point)
    if not entry.endswith("point_maze:PointMazeEnv"):
        return []
    metrics = straight_line_metrics(env_id, max_goals, seed)
    goals = len(eval_goals(env_id).subset(max_goals))
    return [f"The floor of eval success: a scripted policy that heads straight for each goal "
            f"(`sun_lightning/metrics/straight_line.py`) reaches {metrics['eval/success']:.3f} of the same "
            f"{goals} evaluation goals; a learned policy below it does not yet navigate."]


if __name__ == "__main__":
    import sys

    import sun_lightning.envs  # noqa: F401  (registers the environments)

    for env in sys.argv[1:] or ["sun_lightning/PointMazeS-v0", "sun_lightning/PointMazeH-v0"]:
        print(env, {k: round(v, 4) for k, v in straight_line_metrics(env).items()})
