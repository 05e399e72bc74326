"""Cell coverage and normalized Shannon entropy of visits (SPEC §7).

Goal-space cells are the free tiles (x actions) in gridworlds, and 50 bins per
goal dimension within the §6 bounds (x actions where discrete) in continuous
environments (paper appendix "Evaluation metrics"). Metrics are computed over
all visits in the buffer, not over learning batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "cell_coverage_entropy",
    "coverage_entropy_from_cells",
    "binned_cells",
    "num_binned_cells",
    "visit_histogram",
]

from sun_lightning.envs.cells import Bounds, binned_cells, num_binned_cells  # noqa: F401  (re-exported)


def _normalized_entropy(counts: Tensor, num_cells: int) -> float:
    """Shannon entropy of ``counts`` divided by ``log(num_cells)``."""
    counts = counts.to(torch.float64)
    total = counts.sum()
    # A single cell has log(1) = 0: the normalized entropy is undefined, report 0.
    if total <= 0 or num_cells <= 1:
        return 0.0
    p = counts[counts > 0] / total  # 0 log 0 = 0
    h = -(p * p.log()).sum().item()
    return h / math.log(num_cells)


def cell_coverage_entropy(counts: Tensor, valid: Tensor | None = None) -> tuple[float, float]:
    """Coverage and normalized entropy of a visit-count vector (SPEC §7).

    Args:
        counts: Visit counts per cell, shape ``[num_cells]``.
        valid: Optional boolean mask ``[num_cells]`` of the cells that count
            (e.g. free gridworld tiles); visits to invalid cells are ignored.
            ``None`` means every cell is valid (the paper's conservative choice
            for binned continuous spaces).

    Returns:
        ``(coverage, entropy)``: the fraction of valid cells with count >= 1,
        and the Shannon entropy of the visit distribution over valid cells
        divided by ``log(#valid cells)``, in ``[0, 1]``. Both are 0 when there
        are no visits or no valid cells; entropy is 0 with a single valid cell.
    """
    counts = counts.reshape(-1)
    if valid is not None:
        valid = valid.reshape(-1).to(torch.bool)
        if valid.shape != counts.shape:
            raise ValueError(f"valid {tuple(valid.shape)} vs counts {tuple(counts.shape)}")
        counts = counts[valid]
    num_valid = counts.numel()
    if num_valid == 0:
        return 0.0, 0.0
    coverage = (counts >= 1).sum().item() / num_valid
    return coverage, _normalized_entropy(counts, num_valid)


def coverage_entropy_from_cells(cells: Tensor, num_cells: int) -> tuple[float, float]:
    """Same as :func:`cell_coverage_entropy` from visited cell indices.

    Uses ``torch.unique`` instead of a dense histogram, so it also works when
    ``num_cells`` (e.g. ``50**6``) is too large to allocate. Every cell is valid.

    Args:
        cells: Cell index of every visit, ``LongTensor[N]``.
        num_cells: Total number of cells.

    Returns:
        ``(coverage, entropy)`` as in :func:`cell_coverage_entropy`.
    """
    if num_cells <= 0:
        return 0.0, 0.0
    _, counts = torch.unique(cells.reshape(-1), return_counts=True)
    coverage = counts.numel() / num_cells
    return coverage, _normalized_entropy(counts, num_cells)


def visit_histogram(cells: Tensor, num_cells: int) -> Tensor:
    """Visit counts per cell, ``LongTensor[num_cells]`` (a checked ``bincount``)."""
    cells = cells.reshape(-1).to(torch.long)
    if cells.numel() and (int(cells.min()) < 0 or int(cells.max()) >= num_cells):
        raise ValueError("cell index out of range")
    return torch.bincount(cells, minlength=num_cells)
