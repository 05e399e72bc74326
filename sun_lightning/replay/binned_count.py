"""True visit counts of binned goals: the paper's "true counts" ablation of the pseudocount (SPEC §4, §7).

The paper compares SUN's radius pseudocount with exact counts on a grid: 50 bins per goal
dimension over the environment's metric bounds (the cells of the coverage metric, SPEC §7), and
per (bin, action) where actions are part of the goal. An entry's count is the number of stored
entries in its cell, itself included; a FIFO eviction takes the evicted entry out of its cell.

The cells of a high-dimensional goal space (LunarLanderFull: 50⁸ × 4) do not fit a dense table, so
the visited cells are kept as a sorted id tensor with their counts beside it (a lookup is a
``searchsorted``). The standardization σ̃ (the radius reach rule of classic control reads it) is the
radius pseudocount's, over the stored entries, recomputed every ``sigma_every`` inserts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sun_lightning.envs.cells import binned_cells
from sun_lightning.replay.pseudocount_scale import sigma_due, standardization

#: Bins per goal dimension (the paper's evaluation grid).
BINS = 50


class BinnedCount:
    """Exact counts of (50-bin cell, action) over the stored entries, by storage position (a
    :class:`~sun_lightning.replay.counts.Pseudocount`).

    Args:
        low, high: per-goal-dimension metric bounds (finite; values outside are clamped into the edge bins).
        capacity: storage positions.
        num_actions: > 0 when a discrete action is part of the goal.
        sigma_every: inserts between recomputations of the standardization σ̃.
        bins: bins per dimension.
        device: where the counts live.
    """

    def __init__(self, low: Sequence[float], high: Sequence[float], capacity: int, num_actions: int = 0,
                 sigma_every: int = 1000, bins: int = BINS, device: str | torch.device = "cpu") -> None:
        self.low, self.high = tuple(map(float, low)), tuple(map(float, high))
        if not (np.isfinite(self.low).all() and np.isfinite(self.high).all()):
            raise ValueError(f"binned counts need finite metric bounds, got low={self.low} high={self.high}")
        self.num_actions, self.sigma_every, self.bins = num_actions, sigma_every, bins
        self.device = torch.device(device)
        self.cells = torch.empty(0, dtype=torch.long, device=device)  # visited cell ids, sorted
        self.table = torch.empty(0, dtype=torch.long, device=device)  # their counts
        self.keys = torch.full((capacity,), -1, dtype=torch.long, device=device)  # cell of each position
        self.x = torch.zeros(capacity, len(self.low), dtype=torch.float64, device=device)  # for σ̃
        self._size = self._seen = 0
        self._st = np.ones(len(self.low))

    def insert(self, index: torch.Tensor, x: torch.Tensor, action: torch.Tensor | None = None) -> None:
        """Count the entries written at storage positions ``index`` (goals ``x`` ``[B, M]``, actions ``[B]``)."""
        index = index.to(self.device)
        key = binned_cells(x.to(self.device), self.low, self.high, self.bins,
                           None if action is None else action.to(self.device), self.num_actions)
        old = self.keys[index]
        evicted = old >= 0
        if bool(evicted.any()):
            gone = old[evicted]
            self.table.index_add_(0, torch.searchsorted(self.cells, gone), torch.full_like(gone, -1))
        self._size += len(index) - int(evicted.sum())
        fresh = torch.unique(key)
        where = torch.searchsorted(self.cells, fresh)
        known = torch.zeros_like(fresh, dtype=torch.bool)
        inside = where < len(self.cells)
        known[inside] = self.cells[where[inside]] == fresh[inside]
        if not bool(known.all()):
            cells = torch.cat([self.cells, fresh[~known]])
            order = torch.argsort(cells)
            self.cells = cells[order]
            self.table = torch.cat([self.table, torch.zeros(int((~known).sum()), dtype=torch.long,
                                                            device=self.device)])[order]
        self.keys[index] = key
        self.x[index] = x.to(self.device, torch.float64)
        self.table.index_add_(0, torch.searchsorted(self.cells, key), torch.ones_like(key))
        if sigma_due(self._seen, len(index), self.sigma_every):
            stored = self.x[self.keys >= 0]
            self._st = standardization(stored.std(0, unbiased=False).cpu().numpy())
        self._seen += len(index)

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """n of the entries at ``index`` (float, ≥ 1 for stored entries)."""
        return self.table[torch.searchsorted(self.cells, self.keys[index.to(self.device)])].float()

    def scale(self) -> torch.Tensor:
        """The standardization σ̃ ``[M]`` over the stored entries (float32), as the radius pseudocount's."""
        return torch.as_tensor(self._st, dtype=torch.float32, device=self.device)

    def visits(self) -> dict[int, int]:
        """Cell id → count of every cell holding a stored entry."""
        live = self.table > 0
        return dict(zip(self.cells[live].tolist(), self.table[live].tolist()))

    def __len__(self) -> int:
        return self._size
