"""Optimizers of the learners and the target networks' Polyak step."""

from sun_lightning.optim.adamw import ClippedAdamW
from sun_lightning.optim.polyak import polyak_

__all__ = ["ClippedAdamW", "polyak_"]
