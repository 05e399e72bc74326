"""The regular grid of cells over a goal space's metric bounds (SPEC §7: 50 bins per goal dimension, × actions).

Shared by the coverage metrics (:mod:`sun_lightning.metrics.coverage`) and the true-count ablation
(:mod:`sun_lightning.replay.binned_count`), so both count the same cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

Bounds = float | Sequence[float] | Tensor


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
