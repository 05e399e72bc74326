"""Running moments and standardization scale of the radius pseudocount (SPEC §4).

The paper's standardization (appendix "Pseudocount radius and standardization"):
``sigma_m`` = population std of feature m over the stored entries, ``st_m = max(sigma_m,
median_m' sigma_m')`` and ``st_m = 1`` where that is 0.

The moments are running sums of ``x - c`` and ``(x - c)^2`` (float64) with ``c`` a stored data
value, so that a constant feature has exactly zero spread and ``sigma`` costs O(M) at any time.
When the mean drifts far from ``c`` (cancellation would eat the variance), the sums are
recomputed exactly around the stored value closest to the mean.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["RunningMoments"]


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
        st = np.maximum(sigma, np.median(sigma))
        st[st == 0] = 1.0
        return sigma, st

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
