"""What every pseudocount of D's entries offers (SPEC §4): the one interface the replay, the selection transform and
the checkpoints read.

Five implementations satisfy it: the exact (tile, action) counts of gridworlds
(:class:`~sun_lightning.replay.exact_count.ExactCount`), the true counts of binned goals
(:class:`~sun_lightning.replay.binned_count.BinnedCount`) and the radius pseudocount, native
(:class:`~sun_lightning.replay.pseudocount.RadiusPseudocount`, over :mod:`~sun_lightning.replay.pseudocount_index`)
or pure torch (:class:`~sun_lightning.replay.pseudocount_torch.TorchRadiusPseudocount`).
:class:`~sun_lightning.replay.counted.CountedReplay` keeps one of them in step with D.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Pseudocount(Protocol):
    """Counts n of D's entries by storage position, updated on insert (SPEC §4).

    An implementation is picklable (a checkpoint holds it pickled) and counts nothing until the first insert.
    """

    def insert(self, index: torch.Tensor, x: torch.Tensor, action: torch.Tensor | None = None) -> None:
        """Count the entries written at storage positions ``index`` ``[B]``: their goals ``x`` ``[B, M]`` and, where
        actions are part of the goal, their actions ``[B]``. An entry already at a position is evicted first
        (its neighbours lose it); the B new entries count each other."""

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """n of the entries at positions ``index`` (same shape; ≥ 1 where an entry is stored), an O(1) read."""

    def scale(self) -> torch.Tensor | None:
        """The standardization σ̃ ``[M]`` the counts are measured in (float32), ``None`` where counts are exact
        (the reach rule then compares tiles)."""

    def __len__(self) -> int:
        """Entries counted (stored)."""
