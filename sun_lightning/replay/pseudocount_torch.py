"""Pure-torch radius pseudocount of SPEC §4 (brute force, on CPU or CUDA, no C compiler).

:class:`TorchRadiusPseudocount` has the API of :class:`~sun_lightning.replay.pseudocount.
RadiusPseudocount` and gives identical counts, sizes and scales for the same calls: the module
docstring of ``pseudocount.py`` is the reference for the exact semantics of one ``insert`` call
(eviction, the sigma schedule, ``st``, batch neighbours counting pairwise, repeated positions
splitting a call).  Matching it bit for bit takes:

* the same running moments (:class:`RunningMoments`, numpy float64, fed the same rows in the
  same order: evicted rows in call order, then the batch; re-centring sees the survivors in
  storage-position order, then the batch);
* the documented distance ``sum_m ((x_m - y_m) / st_m) ** 2 <= rho ** 2`` in float64,
  accumulated in feature order with one elementwise kernel per operation (subtract, true
  division by a device tensor, square, add: nothing fused, and no ``torch.cdist``, whose
  ``|x|^2 + |y|^2 - 2 x.y`` rounds differently).  The divisor is a tensor on ``device``, never
  a CPU scalar, which CUDA would turn into a multiplication by ``1 / st``.

State (on ``device``): coordinates ``[capacity, M]`` float64, actions ``[capacity]`` int32 and
counts ``[capacity]`` int64.  An empty position holds NaN coordinates (and action -1): that is
the device-side occupancy mask, free in the distance test (a NaN distance is never within rho;
inputs must be finite); a host copy of the occupancy (numpy bool) finds evicted entries without
a device round trip.  An insert is O(N M B): the positions below the highest one ever written
are scanned in blocks of bounded size (``_BLOCK_CPU`` pairs, in cache, on the CPU; more on an
accelerator, fewer kernel launches), for any N and B.  Queries read the stored counts, O(1).
"""

from __future__ import annotations

import numpy as np
import torch

from sun_lightning.replay.pseudocount_scale import (RunningMoments, batch_arrays, check_config,
                                                    np_index, runs_without_repeats, sigma_due,
                                                    st_tensor)

__all__ = ["TorchRadiusPseudocount"]

_BLOCK_CPU = 1 << 16  # (stored x new) pairs per block: 512 KB per float64 temporary on the CPU,
_BLOCK_ACCEL = 1 << 22  # 32 MB on an accelerator
_COLS = 4096  # new samples per block at most


class TorchRadiusPseudocount:
    """Brute-force radius pseudocount over replay-storage positions (SPEC §4; module docstring), a
    :class:`~sun_lightning.replay.counts.Pseudocount`.

    Args:
        goal_dim: M, number of goal features.
        rho: radius in standardized space (``>= 0``).
        capacity: number of storage positions (``index`` values lie in ``[0, capacity)``).
        num_actions: if > 0, entries carry a discrete goal action in ``[0, num_actions)`` and
            only entries with the same action are neighbours.
        sigma_every: K, the standardization is recomputed every K inserted samples.
        device: device holding the state and the tensors returned by ``counts``/``scale``.
    """

    def __init__(self, goal_dim: int, rho: float, capacity: int, num_actions: int = 0,
                 sigma_every: int = 1000, device: str | torch.device = "cpu"):
        (self.goal_dim, self.rho, self.capacity, self.num_actions, self.sigma_every,
         self.device) = check_config(goal_dim, rho, capacity, num_actions, sigma_every, device)
        M, cap, dev = self.goal_dim, self.capacity, self.device
        self._x = torch.full((cap, M), float("nan"), dtype=torch.float64, device=dev)
        self._a = torch.full((cap,), -1, dtype=torch.int32, device=dev)  # -1: empty position
        self._cnt = torch.zeros(cap, dtype=torch.int64, device=dev)
        self._occ = np.zeros(cap, bool)  # host copy of the occupancy
        self._hi = 0  # highest position ever written + 1: the scanned range
        self._n = 0  # stored entries
        self._seen = 0  # samples inserted ever (numbering of the sigma schedule)
        self._moments = RunningMoments(M)
        self._sigma = np.zeros(M)
        self._st = np.ones(M)
        self._st_dev = torch.ones(M, dtype=torch.float64, device=dev)
        self._cache: dict = {}

    # ------------------------------------------------------------------ public API
    def __len__(self) -> int:
        return self._n

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """Stored counts n at storage positions ``index`` (int64, on ``self.device``); 0 = empty.

        Negative positions count from the end (numpy style); others out of range raise
        ``IndexError``.
        """
        if torch.is_tensor(index):
            shape, idx = index.shape, index.detach().reshape(-1).to(self.device, torch.int64)
        else:
            idx = torch.from_numpy(np_index(index)).to(self.device)
            shape = idx.shape
        if self.device.type != "cpu" and idx.numel():  # CPU indexing raises by itself
            lo, hi = torch.aminmax(idx)
            if int(lo) < -self.capacity or int(hi) >= self.capacity:
                raise IndexError("index out of range [0, capacity)")
        return self._cnt[idx].reshape(shape)

    def scale(self) -> torch.Tensor:
        """Current standardization scale st [goal_dim] (float32, on ``self.device``)."""
        return self._st_tensor(torch.float32, self.device).clone()

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        """``x / st`` (same dtype and device as ``x``)."""
        dt = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        return x / self._st_tensor(dt, x.device)

    @torch.no_grad()
    def insert(self, index: torch.Tensor, x: torch.Tensor,
               action: torch.Tensor | None = None) -> None:
        """Write samples ``x`` [B, M] (actions [B]) at storage positions ``index`` [B]."""
        idx, xs, a = batch_arrays(index, x, action, self.goal_dim, self.capacity,
                                  self.num_actions)
        if xs is None:  # empty batch
            return
        if a is None:  # num_actions == 0: every entry carries action 0
            a = np.zeros(len(idx), np.int64)
        for s, e in runs_without_repeats(idx):  # a repeated position splits the call
            self._insert(idx[s:e], xs[s:e], a[s:e])

    # ------------------------------------------------------------------ insert
    def _insert(self, idx: np.ndarray, xs: np.ndarray, a: np.ndarray) -> None:
        """One batch of distinct positions (steps 1-4 of ``pseudocount.py``'s docstring)."""
        B, T, dev, mom = len(idx), self._seen, self.device, self._moments
        ev = idx[self._occ[idx]]  # evicted positions, in call order
        ne = len(ev)
        if ne:
            ev_t = torch.from_numpy(ev).to(dev)
            xe, ae = self._x[ev_t], self._a[ev_t]
            self._occ[ev] = False
            self._x[ev_t] = float("nan")
            self._a[ev_t] = -1
            self._cnt[ev_t] = 0
            mom.add_rows(xe.cpu().numpy(), -1.0)
        mom.add_batch(xs)
        self._n += B - ne
        self._seen = T + B
        if sigma_due(T, B, self.sigma_every):
            self._recompute_sigma(xs)
        xb = torch.from_numpy(xs).to(dev)
        ab = torch.from_numpy(a).to(dev, torch.int32) if self.num_actions else None
        hi = self._hi
        if hi:
            Y, ay = self._x[:hi], (self._a[:hi] if self.num_actions else None)
            if ne:  # evicted entries decrement their surviving neighbours
                self._cnt[:hi] -= self._pairs(Y, ay, xe, ae if self.num_actions else None)[0]
            rows, cols = self._pairs(Y, ay, xb, ab)
            self._cnt[:hi] += rows
        else:
            cols = 0
        new = cols + self._pairs(xb, ab, xb, ab)[0]  # batch neighbours, the sample itself included
        idx_t = torch.from_numpy(idx).to(dev)
        self._x[idx_t] = xb
        self._a[idx_t] = ab if ab is not None else 0
        self._cnt[idx_t] = new
        self._occ[idx] = True
        self._hi = max(hi, int(idx.max()) + 1)

    def _pairs(self, Y: torch.Tensor, ay: torch.Tensor | None, X: torch.Tensor,
               ax: torch.Tensor | None):
        """Row sums [len(Y)] and column sums [len(X)] of the neighbour matrix of Y and X
        (``d^2 <= rho^2`` and, with actions, the same action), computed in bounded blocks."""
        nY, nX = len(Y), len(X)
        rows = torch.zeros(nY, dtype=torch.int64, device=self.device)
        cols = torch.zeros(nX, dtype=torch.int64, device=self.device)
        if nY == 0 or nX == 0:
            return rows, cols
        cb = min(nX, _COLS)
        rb = max(1, (_BLOCK_CPU if self.device.type == "cpu" else _BLOCK_ACCEL) // cb)
        rho2, st = self.rho * self.rho, self._st_dev
        for c0 in range(0, nX, cb):
            Xc = X[c0:c0 + cb]
            for r0 in range(0, nY, rb):
                Yr = Y[r0:r0 + rb]
                d2 = None
                for m in range(self.goal_dim):  # feature order; one kernel per operation
                    t = Yr[:, m, None] - Xc[None, :, m]
                    t.div_(st[m:m + 1])
                    t.mul_(t)
                    d2 = t if d2 is None else d2.add_(t)
                hit = d2 <= rho2
                if ax is not None:
                    hit &= ay[r0:r0 + rb, None] == ax[None, c0:c0 + cb]
                rows[r0:r0 + rb] += hit.sum(1)
                cols[c0:c0 + cb] += hit.sum(0)
        return rows, cols

    def _recompute_sigma(self, extra: np.ndarray) -> None:
        """Re-standardize over survivors (position order) + ``extra`` (the batch)."""
        def live() -> np.ndarray:
            occ = torch.from_numpy(np.flatnonzero(self._occ)).to(self.device)
            return self._x[occ].cpu().numpy()

        sigma, st = self._moments.sigma(self._n, live, extra)
        self._sigma = sigma
        if not np.array_equal(st, self._st):
            self._st = st.copy()
            self._st_dev = torch.from_numpy(self._st.copy()).to(self.device)
            self._cache = {}

    def _st_tensor(self, dtype, device) -> torch.Tensor:
        return st_tensor(self._cache, self._st, dtype, device)

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cache = {}

