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

Bounds = float | Sequence[float] | Tensor


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


def _as_bounds(b: Bounds, m: int) -> Tensor:
    t = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    if t.numel() == 1:
        t = t.expand(m)
    if t.numel() != m:
        raise ValueError(f"bounds have {t.numel()} entries, expected {m}")
    return t


def num_binned_cells(num_dims: int, bins: int = 50, num_actions: int = 0) -> int:
    """Number of cells produced by :func:`binned_cells`: ``bins**M * max(num_actions, 1)``."""
    return int(bins) ** int(num_dims) * max(int(num_actions), 1)


def binned_cells(
    x: Tensor,
    low: Bounds,
    high: Bounds,
    bins: int = 50,
    action: Tensor | None = None,
    num_actions: int = 0,
) -> Tensor:
    """Flat cell index of each row on a regular grid (SPEC §7).

    Each dimension ``j`` is split into ``bins`` equal bins over
    ``[low_j, high_j]``; bin ``i`` covers ``[low + i w, low + (i+1) w)`` and the
    last bin also contains ``high``. Values outside the bounds are clamped into
    the edge bins (bin 0 or ``bins - 1``): the paper's bounds for unbounded
    spaces (LunarLander y, ArmPush-H x/y) are chosen to hold nearly all
    visits, and clamping keeps every visit counted rather than dropping it.

    The flat index is row-major over dimensions (first dimension most
    significant). With actions, ``cell = bin_index * num_actions + action``.

    Args:
        x: Goal coordinates ``[N, M]``.
        low: Lower bounds, scalar or ``[M]``.
        high: Upper bounds, scalar or ``[M]``.
        bins: Bins per dimension (paper: 50).
        action: Optional discrete actions ``LongTensor[N]`` in ``[0, num_actions)``.
        num_actions: Number of discrete actions; required when ``action`` is given.

    Returns:
        ``LongTensor[N]`` in ``[0, num_binned_cells(M, bins, num_actions))``.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [N, M], got {tuple(x.shape)}")
    m = x.shape[1]
    lo = _as_bounds(low, m).to(x.device)
    hi = _as_bounds(high, m).to(x.device)
    if bool((hi <= lo).any()):
        raise ValueError("high must exceed low in every dimension")
    # float64 so that points just below a bin edge are not rounded onto it.
    u = (x.to(torch.float64) - lo) / (hi - lo) * bins
    idx = u.floor().clamp(0, bins - 1).to(torch.long)
    weights = bins ** torch.arange(m - 1, -1, -1, device=x.device, dtype=torch.long)
    flat = (idx * weights).sum(dim=1)
    if action is not None:
        if num_actions <= 0:
            raise ValueError("num_actions must be positive when action is given")
        action = action.reshape(-1).to(torch.long)
        if bool(((action < 0) | (action >= num_actions)).any()):
            raise ValueError("action out of range")
        flat = flat * num_actions + action
    return flat


def visit_histogram(cells: Tensor, num_cells: int) -> Tensor:
    """Visit counts per cell, ``LongTensor[num_cells]`` (a checked ``bincount``)."""
    cells = cells.reshape(-1).to(torch.long)
    if cells.numel() and (int(cells.min()) < 0 or int(cells.max()) >= num_cells):
        raise ValueError("cell index out of range")
    return torch.bincount(cells, minlength=num_cells)
