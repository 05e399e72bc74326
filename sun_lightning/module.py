"""The learner interface that data collection relies on.

A learner is a LightningModule that owns its networks, losses and optimizers
only (environments, collectors and storage live in the DataModule). Data
collection reads values from it through the two methods below, so the DQN
variant (SPEC §5a) and the TD3 variant (§5b) are interchangeable.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from sun_lightning.envs.registry import GoalSpace


class SVFModule(pl.LightningModule):
    """Base class of successor-value-function learners.

    Args:
        goal_space: the environment's goal space (dimensions and action set);
            linked from the DataModule by the CLI, so the learner never needs to
            know which environment it trains on (hence optional in the signature).
    """

    def __init__(self, goal_space: GoalSpace | None = None) -> None:
        super().__init__()
        if goal_space is None:
            raise ValueError("goal_space is required (the CLI links it from data.env_id)")
        self.goal_space = goal_space
        self.automatic_optimization = False
        self.updates = 0  # learner updates, counted here: global_step counts optimizer steps

    def observe(self, obs: torch.Tensor) -> None:
        """Called with every collected vector step's observations (running statistics)."""

    def action_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """Values of every action for acting, ``[B, |A|]`` (discrete learners)."""
        raise NotImplementedError

    def act(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """Greedy action towards the goal."""
        return self.action_values(obs, goal, goal_action).argmax(-1)

    def goal_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """V(s, g) for ``obs [B, D]`` and candidates ``goal [B, K, G]``: ``[B, K]`` (``[E, B, K]`` for ensembles)."""
        raise NotImplementedError

    def goal_and_action_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`goal_values`, and the values :meth:`act` would read for acting towards each candidate
        ``[B, K, |A|]`` from the same evaluation (``None`` where the learner has none, e.g. continuous actions).

        ``goal_keys [B, K]`` (optional): integers equal exactly where the candidates' goal projections are
        (the replay storage's ``goal_keys``); a learner may use them to evaluate each distinct goal once.
        """
        return self.goal_values(obs, goal, goal_action), None

    def pop_train_metrics(self) -> dict[str, float]:
        """Means of the training statistics since the last call (``train/...`` names)."""
        return {}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sun_updates"] = self.updates

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.updates = checkpoint.get("sun_updates", 0)
