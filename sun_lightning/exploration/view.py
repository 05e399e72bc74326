"""What the rest of a run reads of its exploration (SPEC §7, §9): a narrow, typed view, and the one way to it.

Callbacks log, evaluate, draw and checkpoint against the run's env frames and its replay storage D; they need a
dozen of the run's values and nothing of how it is built. :class:`RunView` names exactly those, and
:func:`run_view`, which hands out the run's :class:`~sun_lightning.exploration.handle.Exploration` typed as this
view, is the only reader of ``trainer.datamodule`` outside this package (the layer test,
``tests/layers.py``, fails on any other), so a rename here is seen by every reader's type, not by a crash mid-run.
"""

from __future__ import annotations

from typing import Protocol

import torch

from sun_lightning.envs.custom import CustomEnv
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.events import Events
from sun_lightning.exploration.stats import CollectionStats
from sun_lightning.replay.storage import GoalReplayStorage


class RunView(Protocol):
    """One running exploration as its readers see it (:class:`~sun_lightning.exploration.handle.Exploration` is one;
    after ``teardown`` it is closed and still readable)."""

    config: DataConfig  # the run's ``data`` config; its total_frames are whole vector steps
    goal_space: GoalSpace
    custom: CustomEnv | None  # a user's environment (data.goal), else None
    events: Events  # ``frames`` and ``goals`` (exploration/events.py)

    @property
    def frames(self) -> int:
        """Env frames of the whole job so far (every rank's under DDP)."""

    @property
    def storage(self) -> GoalReplayStorage:
        """The replay storage D."""

    @property
    def pseudocount(self):
        """The counts of D's entries (SPEC §4)."""

    @property
    def window(self) -> CollectionStats:
        """The logging window's goal statistics."""

    @property
    def run_seed(self) -> int:
        """The run's seed (before a rank's offset)."""

    def scale(self) -> torch.Tensor | None:
        """The radius pseudocount's goal standardization σ̃ (``None`` for exact counts)."""


def run_view(trainer, required: bool = True) -> RunView | None:
    """The exploration ``trainer`` fits on (built by the data module's ``setup``, which Lightning calls before the
    callbacks'), as :class:`RunView`; without one, an error (``None`` where not ``required``: a callback that has
    nothing to show without it)."""
    run = getattr(trainer.datamodule, "exploration", None)
    if run is None and required:
        raise ValueError("this trainer fits without an exploration (the `data` group), or is read before its setup")
    return run
