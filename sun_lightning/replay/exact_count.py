"""Exact (tile, action) visit counts: the gridworld pseudocount (SPEC §4, last bullet)."""

from __future__ import annotations

import torch


class ExactCount:
    """Pseudocount (:class:`~sun_lightning.replay.counts.Pseudocount`) that coincides with the visit count of
    (tile, action) cells.

    Each storage entry keeps its cell key; the count of an entry is the visit
    count of its cell, read in O(1) from a table that insertion (and eviction)
    keeps up to date. The table is also the visit histogram the gridworld
    metrics need (SPEC §7).

    Args:
        num_cells: number of (tile, action) cells.
        capacity: storage capacity (entries).
        num_actions: |A|, to form the cell key tile·|A| + action.
        device: where the table lives.
    """

    def __init__(self, num_cells: int, capacity: int, num_actions: int, device: str | torch.device = "cpu") -> None:
        self.num_actions = num_actions
        self.table = torch.zeros(num_cells, dtype=torch.long, device=device)
        self.keys = torch.full((capacity,), -1, dtype=torch.long, device=device)
        self._size = 0

    def insert(self, index: torch.Tensor, x: torch.Tensor, action: torch.Tensor | None = None) -> None:
        """Count entries written at storage positions ``index`` (one-hot goals ``x``, actions)."""
        old = self.keys[index]
        evicted = old >= 0
        # Evicted entries' cells lose a visit (fresh positions add 0 to cell 0): no boolean indexing,
        # which would wait for the mask.
        self.table.index_add_(0, old.clamp(min=0), evicted.long().neg_())
        self._size += len(index) - int(evicted.sum())
        key = x.argmax(-1) * self.num_actions + action.long()
        self.keys[index] = key
        self.table.index_add_(0, key, torch.ones_like(key))

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """n of the entries at ``index`` (float, ≥ 1)."""
        return self.table[self.keys[index]].float()

    def scale(self) -> None:
        """No standardization: exact counts compare tiles (the reach rule too)."""
        return None

    def visits(self) -> torch.Tensor:
        """Visit count of every cell."""
        return self.table

    def __len__(self) -> int:
        return self._size
