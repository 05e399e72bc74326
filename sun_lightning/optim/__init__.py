"""Optimizers of the learners."""

from sun_lightning.optim.adamw import ClippedAdamW

__all__ = ["ClippedAdamW"]
