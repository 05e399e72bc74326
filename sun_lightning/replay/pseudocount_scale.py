"""Running moments and standardization scale of the radius pseudocount (SPEC §4).

The paper's standardization (appendix "Pseudocount radius and standardization"):
``sigma_m`` = population std of feature m over the stored entries, ``st_m = max(sigma_m,
median_m' sigma_m')`` and ``st_m = 1`` where that is 0.

The moments are running sums of ``x - c`` and ``(x - c)^2`` (float64) with ``c`` a stored data
value, so that a constant feature has exactly zero spread and ``sigma`` costs O(M) at any time.
When the mean drifts far from ``c`` (cancellation would eat the variance), the sums are
recomputed exactly around the stored value closest to the mean.

The module also holds what the native (:class:`~sun_lightning.replay.pseudocount.
RadiusPseudocount`) and the pure-torch (:class:`~sun_lightning.replay.pseudocount_torch.
TorchRadiusPseudocount`) pseudocounts share at their interface: the constructor checks
(:func:`check_config`), the batch-insert argument checks and conversions (:func:`batch_arrays`,
:func:`np_index`, :func:`np_float`), the split of a call at repeated positions
(:func:`runs_without_repeats`), the sigma schedule (:func:`sigma_due`) and the cached scale
tensors (:func:`st_tensor`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

__all__ = ["RunningMoments", "batch_arrays", "check_config", "np_float", "np_index",
           "runs_without_repeats", "sigma_due", "st_tensor", "standardization"]


class RunningMoments:
    """Shifted running sums over the stored goal features.

    ``mom`` is one float64 block ``[c (M), S1 (M), S2 (M)]`` that the native index also updates
    in place on single inserts (``d = x - c; S1 += d; S2 += d * d`` per feature, the arithmetic of
    :meth:`add_rows` for one row), so it is never rebound.

    Args:
        goal_dim: M, number of goal features.
    """

    def __init__(self, goal_dim: int):
        M = goal_dim
        self.goal_dim = M
        self.mom = np.zeros(3 * M)
        self.c = self.mom[:M]
        self.S1 = self.mom[M:2 * M]
        self.S2 = self.mom[2 * M:]
        self.has_c = False  # c is set from the first sample ever inserted

    def set_shift(self, x: np.ndarray) -> None:
        """Take the first sample as the shift ``c`` (no-op once set)."""
        if not self.has_c:
            self.c[:] = x
            self.has_c = True

    def add_rows(self, x: np.ndarray, sign: float) -> None:
        """Add (``sign = 1``) or remove (``-1``) the rows of ``x`` [n, M] (batch path)."""
        d = x - self.c
        self.S1 += sign * d.sum(0)
        self.S2 += sign * (d * d).sum(0)

    def add_batch(self, x: np.ndarray) -> None:
        """Add the rows of a new batch ``x`` [B, M] (``B >= 1``), its first row becoming the shift
        ``c`` if none is set yet."""
        self.set_shift(x[0])
        self.add_rows(x, 1.0)

    def mean(self, n: int) -> np.ndarray:
        """Mean of the ``n`` stored entries [M]."""
        return self.c + self.S1 / max(n, 1)

    def sigma(self, n: int, live: Callable[[], np.ndarray], extra: np.ndarray):
        """``(sigma, st)`` over the ``n`` stored entries.

        Args:
            n: number of stored entries (``> 0``).
            live: returns the coordinates [n', M] of the entries held by the index; with
                ``extra`` [n - n', M] (samples counted in the moments, not yet in the index) they
                are the stored set, used only to re-centre.
            extra: see ``live``.
        """
        S1, S2 = self.S1, self.S2
        m1 = S1 / n
        var = S2 / n - m1 * m1
        far = (m1 * m1 > 16.0 * np.maximum(var, 0.0)) & (S2 > 0)
        if far.any() and n > 1:
            self._recenter(np.concatenate((live(), extra)))
            m1 = S1 / n
            var = S2 / n - m1 * m1
        sigma = np.where(S2 > 0, np.sqrt(np.maximum(var, 0.0)), 0.0)
        return sigma, standardization(sigma)

    def _recenter(self, X: np.ndarray) -> None:
        """Exact sums with a new shift: the stored value closest to the mean (per feature)."""
        X = X.T  # [M, n]
        mean = X.mean(1)
        c = X[np.arange(self.goal_dim), np.argmin(np.abs(X - mean[:, None]), axis=1)]
        d = X - c[:, None]
        self.c[:] = c
        self.S1[:] = d.sum(1)
        self.S2[:] = (d * d).sum(1)

    def __getstate__(self) -> dict:
        return {"goal_dim": self.goal_dim, "mom": self.mom.copy(), "has_c": self.has_c}

    def __setstate__(self, state: dict) -> None:
        # c, S1, S2 must stay views of the one block the native index writes to
        self.__init__(state["goal_dim"])
        self.mom[:] = state["mom"]
        self.has_c = state["has_c"]


# ---------------------------------------------------------------------- shared by both backends
def check_config(goal_dim: int, rho: float, capacity: int, num_actions: int, sigma_every: int,
                 device: str | torch.device):
    """Checked and normalized constructor arguments of a radius pseudocount.

    Returns:
        ``(goal_dim, rho, capacity, num_actions, sigma_every, device)`` as
        ``(int, float, int, int, int, torch.device)``.

    Raises:
        ValueError: ``goal_dim < 1``, ``rho`` not ``>= 0`` (NaN included), ``capacity < 1``,
            ``sigma_every < 1`` or ``num_actions < 0`` (checked in this order).
    """
    if goal_dim < 1:
        raise ValueError("goal_dim must be >= 1")
    if not rho >= 0:
        raise ValueError("rho must be >= 0")
    if capacity < 1:
        raise ValueError("capacity must be >= 1")
    if sigma_every < 1:
        raise ValueError("sigma_every must be >= 1")
    if num_actions < 0:
        raise ValueError("num_actions must be >= 0")
    return (int(goal_dim), float(rho), int(capacity), int(num_actions), int(sigma_every),
            torch.device(device))


def np_index(t) -> np.ndarray:
    """``t`` (tensor on any device, array or sequence) as a flat contiguous int64 numpy array."""
    if torch.is_tensor(t):
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.numpy()
    return np.ascontiguousarray(np.asarray(t).reshape(-1), np.int64)


def np_float(t) -> np.ndarray:
    """``t`` (tensor on any device, array or sequence) as a new float64 numpy array (same shape;
    half-precision tensors go through float32)."""
    if torch.is_tensor(t):
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy().astype(np.float64)
    return np.array(t, np.float64)


def batch_arrays(index, x, action, goal_dim: int, capacity: int, num_actions: int):
    """Checked numpy arrays of one batch ``insert(index, x, action)``.

    Args:
        index: storage positions [B] (tensor, array or sequence).
        x: goal features, B * ``goal_dim`` values (reshaped to [B, goal_dim]).
        action: goal actions [B] when ``num_actions > 0``, else ``None``.
        goal_dim, capacity, num_actions: of the pseudocount.

    Returns:
        ``(idx, xs, a)``: int64 [B], contiguous float64 [B, goal_dim] and int64 [B] (``None``
        when ``num_actions == 0``); ``(idx, None, None)`` for an empty batch (nothing else is
        read or checked then).

    Raises:
        IndexError: an index outside ``[0, capacity)``.
        ValueError: ``x`` not of B * ``goal_dim`` values, non-finite features, or actions
            missing, given when ``num_actions == 0``, of another length or out of range.
    """
    idx = np_index(index)
    B = len(idx)
    if B == 0:
        return idx, None, None
    xs = np.ascontiguousarray(np_float(x).reshape(B, goal_dim))
    if idx.min() < 0 or idx.max() >= capacity:
        raise IndexError("index out of range [0, capacity)")
    if not np.isfinite(xs).all():
        raise ValueError("goal features must be finite")
    if num_actions > 0:
        if action is None:
            raise ValueError("action is required when num_actions > 0")
        a = np_index(action)
        if len(a) != B:
            raise ValueError("action must have one entry per sample")
        if a.min() < 0 or a.max() >= num_actions:
            raise ValueError("action out of range [0, num_actions)")
    else:
        if action is not None:
            raise ValueError("action given but num_actions == 0")
        a = None
    return idx, xs, a


def runs_without_repeats(idx: np.ndarray) -> list[tuple[int, int]]:
    """Split positions ``idx`` [B] into consecutive runs of distinct positions.

    A run ends just before the first position it already holds (sample-by-sample semantics: the
    later sample evicts the earlier one), so inserting the runs in order as batches is the call.

    Returns:
        ``[(start, stop), ...]`` covering ``range(B)`` in order; ``[(0, B)]`` without repeats.
    """
    il = idx.tolist()
    if len(set(il)) == len(il):
        return [(0, len(il))]
    runs, start, seen = [], 0, set()
    for i, v in enumerate(il):
        if v in seen:
            runs.append((start, i))
            start, seen = i, set()
        seen.add(v)
    runs.append((start, len(il)))
    return runs


def standardization(sigma: np.ndarray) -> np.ndarray:
    """The scale ``st`` of per-feature stds ``sigma`` [M]: ``max(sigma_m, median sigma)``, 1 where that is 0
    (the paper's appendix "Pseudocount radius and standardization")."""
    st = np.maximum(sigma, np.median(sigma))
    st[st == 0] = 1.0
    return st


def sigma_due(seen: int, B: int, sigma_every: int) -> bool:
    """Whether a batch of ``B`` samples numbered ``seen, ..., seen + B - 1`` (over all inserts
    ever made) covers a multiple of ``sigma_every``: then ``sigma`` is recomputed (the first batch
    always recomputes)."""
    return (seen + B - 1) // sigma_every > (seen - 1) // sigma_every


def st_tensor(cache: dict, st: np.ndarray, dtype: torch.dtype, device) -> torch.Tensor:
    """The scale ``st`` as a tensor of ``dtype`` on ``device``, made once per (dtype, device) and
    kept in ``cache`` (the owner empties ``cache`` whenever ``st`` changes)."""
    key = (dtype, str(device))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = torch.as_tensor(st.copy(), dtype=dtype, device=device)
    return hit
