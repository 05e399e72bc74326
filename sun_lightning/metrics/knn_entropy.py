"""Kozachenko–Leonenko k-NN differential entropy (SPEC §7).

Paper appendix "Evaluation metrics", Eq. (kl_entropy). On each subsample of
``m`` points (observations min–max normalized to ``[0, 1]^D`` with the given
bounds) the estimator is::

    H = psi(m) - psi(k) + log c_D + (D / m) * sum_i log rho_k(i)

* ``rho_k(i)``: Euclidean distance (a *radius*) from point ``i`` to its k-th
  nearest other point;
* ``c_D = pi^(D/2) / Gamma(D/2 + 1)``: volume of the unit-*radius* ball in R^D,
  matching the radius convention.

The paper writes ``log(m - 1)`` where we use ``psi(m)``; the two differ by
``O(1/m)`` (about 5e-5 nats at ``m = 10^4``). The normalization is undone by
adding ``sum_j log(u_j - l_j)``, so the returned value is in original units.
For discrete actions the joint entropy is ``H(s, a) = H(a) + sum_a p(a) H(s | a)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy.spatial import cKDTree
from scipy.special import digamma
from torch import Tensor

__all__ = ["knn_entropy", "kl_entropy_estimate"]

Bounds = float | Sequence[float] | Tensor | None

# Floor on k-NN distances (in normalized units): exact duplicates would give
# log 0 = -inf; the floor keeps the estimate finite (and very negative).
_MIN_DIST = 1e-10


def kl_entropy_estimate(u: np.ndarray, k: int = 3) -> float:
    """Kozachenko–Leonenko estimate on one point set, no normalization.

    Args:
        u: Points ``[m, D]`` (float64), ``m > k``.
        k: Neighbour order.

    Returns:
        Differential entropy estimate in nats, in the units of ``u``.
    """
    m, d = u.shape
    if m <= k:
        raise ValueError(f"need more than k={k} points, got {m}")
    tree = cKDTree(u)
    # k + 1 because each point is its own nearest neighbour (distance 0).
    dist, _ = tree.query(u, k=k + 1)
    rho = np.maximum(dist[:, k], _MIN_DIST)
    log_c_d = 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d + 1.0)
    return float(digamma(m) - digamma(k) + log_c_d + d * np.log(rho).mean())


def _bounds(b: Bounds, default: np.ndarray) -> np.ndarray:
    if b is None:
        return default
    t = torch.as_tensor(b, dtype=torch.float64).cpu().numpy().reshape(-1)
    if t.size not in (1, default.size):
        raise ValueError(f"bounds have {t.size} entries, expected {default.size}")
    return np.broadcast_to(t, default.shape).astype(np.float64)


def _subsampled(
    u: np.ndarray, k: int, subsamples: int, subsample_size: int, generator: torch.Generator | None
) -> float:
    n = u.shape[0]
    if n <= subsample_size:
        # Every "subsample" would be the whole set: one evaluation is the average.
        return kl_entropy_estimate(u, k)
    values = []
    for _ in range(subsamples):
        idx = torch.randperm(n, generator=generator)[:subsample_size].numpy()
        values.append(kl_entropy_estimate(u[idx], k))
    return float(np.mean(values))


def knn_entropy(
    x: Tensor,
    low: Bounds = None,
    high: Bounds = None,
    k: int = 3,
    subsamples: int = 5,
    subsample_size: int = 10_000,
    action: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> float:
    """k-NN differential entropy of visited goals, in nats (SPEC §7).

    Args:
        x: Goal coordinates ``[N, D]``.
        low: Lower bounds (scalar or ``[D]``) for min–max normalization;
            ``None`` uses the data minimum per dimension.
        high: Upper bounds, likewise; ``None`` uses the data maximum.
        k: Neighbour order (paper: 3).
        subsamples: Number of random subsamples averaged (paper: 5).
        subsample_size: Points per subsample (paper: 10^4); when a point set is
            not larger than this, it is used whole, once.
        action: Optional discrete actions ``LongTensor[N]``; then the joint
            ``H(s, a) = H(a) + sum_a p(a) H(s | a)`` is returned, with ``H(a)``
            the plug-in Shannon entropy of the empirical action frequencies and
            each ``H(s | a)`` estimated on that action's rows (same bounds).
            Actions with at most ``k`` rows cannot be estimated; their
            conditional term is dropped and the remaining ``p(a)`` of the sum
            are renormalized (``H(a)`` still uses all rows).
        generator: Optional ``torch.Generator`` for the subsample draws.

    Returns:
        Estimated differential entropy in the original units of ``x`` (plus
        ``H(a)`` with actions). Dimensions with zero width (``high == low``)
        are not rescaled (width treated as 1, no correction): their entropy is
        degenerate and shows up through the distance floor instead.

    Raises:
        ValueError: If there are not more than ``k`` points to estimate from.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [N, D], got {tuple(x.shape)}")
    xs = x.detach().to(torch.float64).cpu().numpy()
    n, d = xs.shape
    if n == 0:
        raise ValueError("empty point set")
    lo = _bounds(low, xs.min(axis=0))
    hi = _bounds(high, xs.max(axis=0))
    width = hi - lo
    width = np.where(width > 0, width, 1.0)
    u = (xs - lo) / width
    correction = float(np.log(width).sum())

    if action is None:
        return _subsampled(u, k, subsamples, subsample_size, generator) + correction

    a = action.detach().reshape(-1).cpu().numpy()
    if a.shape[0] != n:
        raise ValueError(f"action has {a.shape[0]} rows, x has {n}")
    values, counts = np.unique(a, return_counts=True)
    p = counts / n
    h_a = float(-(p * np.log(p)).sum())
    cond, weights = [], []
    for value, count in zip(values, counts):
        if count <= k:
            continue
        cond.append(_subsampled(u[a == value], k, subsamples, subsample_size, generator))
        weights.append(count)
    if not cond:
        raise ValueError(f"no action has more than k={k} points")
    w = np.asarray(weights, dtype=np.float64)
    h_s_given_a = float((w / w.sum()) @ np.asarray(cond))
    return h_a + h_s_given_a + correction
