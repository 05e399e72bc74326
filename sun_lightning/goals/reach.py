"""When a goal counts as reached (SPEC §2, paper appendix "Goal-reached")."""

from __future__ import annotations

import torch

from sun_lightning.envs.registry import GoalSpace


def goal_reached(
    space: GoalSpace,
    achieved: torch.Tensor,
    action: torch.Tensor | None,
    goal: torch.Tensor,
    goal_action: torch.Tensor | None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Whether taking ``action`` in a state projecting to ``achieved`` reaches ``(goal, goal_action)``.

    Args:
        space: the environment's goal space; its ``reach`` rule decides.
        achieved: goal projection of the states, ``[..., G]``.
        action: discrete actions ``[...]`` (ignored for continuous-action spaces).
        goal: goal projections ``[..., G]``.
        goal_action: goal actions ``[...]`` (discrete spaces).
        scale: per-dimension standardization σ̃ ``[G]`` for the ``"radius"`` rule
            (the pseudocount's; SPEC §4).

    Returns:
        Bool tensor ``[...]``.
    """
    if space.reach == "exact":
        same = space.tile(achieved) == space.tile(goal)
    elif space.reach == "radius":
        if scale is None:
            raise ValueError("the 'radius' reach rule needs the pseudocount's standardization scale")
        same = (((achieved - goal) / scale) ** 2).sum(-1) <= space.rho**2
    else:
        return (achieved - goal).norm(dim=-1) < space.eta
    if space.discrete:
        same = same & (action.long() == goal_action.long())
    return same
