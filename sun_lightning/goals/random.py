"""The Random baseline: uniform random actions, no goals, no learning (SPEC §3)."""

from __future__ import annotations

import torch

from sun_lightning.goals.base import GoalSelector


class RandomActions(GoalSelector):
    """Acts uniformly at random; stores data and logs metrics like every other rule."""

    uses_goals = False
    learns = False

    def __init__(self) -> None:
        super().__init__(num_candidates=1)

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("RandomActions selects no goals")
