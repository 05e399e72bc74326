"""Goal selection: strategies (SPEC §3) and the TorchRL transform that applies them."""

from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.random import RandomActions
from sun_lightning.goals.sun import SUNAdaptive, SUNPerStep

__all__ = ["GoalSelector", "RandomActions", "SUNAdaptive", "SUNPerStep"]
