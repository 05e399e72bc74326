"""What the environment side needs of the learner (SPEC §9): a narrow protocol, not the whole LightningModule.

The loop asks it for a replay sampler and an acting policy and feeds it observations; the goal selection
transform reads its goal values (:class:`~sun_lightning.goals.base.GoalValues`). Every
:class:`~sun_lightning.learners.base.Learner` is one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from sun_lightning.goals.base import GoalValues


@runtime_checkable
class Agent(GoalValues, Protocol):
    batches_per_update: int  # independent batches one update trains on (one per ensemble member)

    def make_sampler(self) -> Any:
        """The replay sampler of its learning batches (``steps_needed``, ``sample(storage, scale, count)``)."""

    def make_policy(self, uses_goals: bool) -> Any:
        """The acting policy the collector runs (its ``warmup`` flag: uniformly random actions)."""

    def observe(self, obs: torch.Tensor) -> None:
        """Feed the collected observations ``[N, obs_dim]`` to its running statistics (input normalization)."""
