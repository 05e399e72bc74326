"""SUN goal-selection rules (paper §3, SPEC §3)."""

from __future__ import annotations

import torch

from sun_lightning.goals.base import GoalSelector


class SUNAdaptive(GoalSelector):
    """SUN with adaptive reselection (Algorithm 1 of the paper).

    Score V(s_t, g) / n_g; the goal is re-selected at t = 0, when reached, or
    when V(s_t, g_t) < V(s_sel, g_t), V(s_sel, g_t) being the value stored at
    selection time (paper §3.2).
    """

    adaptive = True

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return values / counts

    def should_reselect(
        self, reached: torch.Tensor, value_now: torch.Tensor, value_at_selection: torch.Tensor
    ) -> torch.Tensor:
        return reached | (value_now < value_at_selection)


class SUNPerStep(GoalSelector):
    """SUN with per-step selection (paper §3.2, SPEC §3).

    A fresh candidate batch every step; the agent switches when a candidate
    scores strictly higher than its current goal, V(s_t, g_t) / n_{g_t} with
    the goal's current count.
    """

    per_step = True

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return values / counts
