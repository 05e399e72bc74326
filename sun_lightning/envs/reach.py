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
    achieved_index: torch.Tensor | None = None,
    goal_index: torch.Tensor | None = None,
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
        achieved_index, goal_index: when given, ``achieved`` and ``goal`` are
            tables and these their rows (a learning batch's layout); exact
            spaces then compare tiles computed once per table entry.

    Returns:
        Bool tensor ``[...]``.
    """

    def rows(table: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        return table if index is None else table[index]

    if space.reach == "exact":
        same = rows(space.tile(achieved), achieved_index) == rows(space.tile(goal), goal_index)
    else:
        diff = rows(achieved, achieved_index) - rows(goal, goal_index)
        if space.reach == "distance":
            return diff.norm(dim=-1) < space.eta
        if scale is None:
            raise ValueError("the 'radius' reach rule needs the pseudocount's standardization scale")
        same = ((diff / scale) ** 2).sum(-1) <= space.rho**2
    if space.discrete:
        same = same & (action.long() == goal_action.long())
    return same
