"""Radius pseudocount of SPEC §4 (paper appendix "Pseudocount radius and standardization").

Every stored entry ``i`` carries ``n_i``: the number of stored entries within radius ``rho`` of
its goal projection ``x_i`` (itself included) in standardized feature space,

    sigma_m   = std of feature m over all stored entries (population std, ddof=0)
    st_m      = max(sigma_m, median_m' sigma_m'), and st_m = 1 where that is 0
    d(x, y)^2 = sum_m ((x_m - y_m) / st_m) ** 2,          neighbours: d^2 <= rho^2

(the fallback to 1 applies where the floored ``st_m`` is 0, as in the paper: a constant feature
is floored by the median first, and falls back to 1 only when the median is 0 too).  When
``num_actions > 0`` neighbours must also share the discrete goal action.  Counts are maintained
at insertion time (new entry: neighbours + 1; every neighbour: +1), evicted entries decrement
their neighbours, and a query is an O(1) read of the stored count.  Stored counts are never
recomputed when ``sigma`` changes (the paper's behaviour).

Exact semantics of one ``insert(index, x, action)`` call (a *batch* of B samples):

1. Entries already stored at ``index`` are evicted (a FIFO storage that wraps).
2. ``sigma`` is recomputed if the batch covers a global sample number that is a multiple of
   ``sigma_every`` (samples are numbered 0, 1, 2, ... over all inserts ever made, so the first
   batch always recomputes).  The recomputed ``sigma`` is the std over the stored set *after*
   the batch (survivors + the batch's samples).  Otherwise the batch uses the ``st`` of the last
   recompute.  One batch uses one ``st`` for everything below.
3. Each evicted entry decrements every surviving (not evicted, previously stored) entry within
   ``rho`` of it.
4. Each new sample gets ``n = 1 + #survivors within rho + #other batch samples within rho`` and
   every survivor within ``rho`` of it gets +1.  (With one ``st`` this equals inserting the
   batch's samples one after another: batch neighbours count pairwise.)
5. A position repeated inside one call splits the call into consecutive batches at the
   repetition (sample-by-sample semantics: the later sample evicts the earlier one).

Distances are evaluated in float64 as ``sum_m ((x_m - y_m) / st_m) ** 2 <= rho ** 2``,
accumulated in feature order with true divisions and no fused multiply-add (the native code is
compiled with ``-ffp-contract=off``), so ties at exactly ``rho`` behave like numpy.  Every pair
is decided by this formula or by a bound that provably agrees with it, with conservative
margins: a cell entirely inside (or outside) the ball by a relative 1e-9 of ``rho^2``, or an
approximate distance (error < 1e-13) farther than a relative 1e-12 from ``rho^2``.  Inputs must
be finite.

Data structure (CPU; tensors on any device are moved to the CPU at the interface):

* running sums of ``x - c`` and ``(x - c)^2`` (float64, ``c`` a stored data value, so that a
  constant feature has exactly zero spread; re-centred exactly if the mean drifts far from ``c``)
  give ``sigma`` in O(M) at any time, so recomputing it every K inserts costs nothing
  (``pseudocount_scale.py``);
* the index is a small C kernel (``_pseudocount.c``), compiled on first use with the system C
  compiler and loaded with ctypes (``pseudocount_native.py``; geometry policy in
  ``pseudocount_index.py``).  It is a hash grid (open addressing, 32-bit tags) over up to four
  "grid" features: all of them when M <= 4, else the four with the largest sigma / st, re-chosen
  at every rebuild.  A cell is keyed by its integer coordinates ``floor((x - o) / L)`` (clamped
  beyond 2^40 cells from the origin ``o``, the mean at build time) and the goal action, and owns
  one malloc'ed block holding its entries feature by feature (float64), then their counts and
  storage positions (int32): a cell's counts are one dense run.  A position -> (cell, offset)
  map makes eviction O(1) (swap-remove inside the cell) and count reads O(1);
* cell sides are ``L = f 2^level max(rho, 1e-6) st`` of build time, f = 0.3125, 0.625, 1.25, 2
  for 1-4 grid features.  The level adapts to the density: the C side doubles the sides when the
  grid is sparse (more non-empty cells than half the entries, plus 4096), the Python side halves
  them at a re-standardization when it is dense (more than 128 entries per non-empty cell with
  1-2 grid features, 48 with 3-4), within levels -2 ... 6;
* a query visits the cells of the box ``[x - r, x + r]`` per grid feature (``r = rho st`` of
  *now* plus rounding margins; the cell function is monotone, so the box is exact for any st),
  skipping cells whose lower distance bound exceeds rho; the lookups are pipelined with
  prefetches.  When M <= 4, cells entirely inside the ball are counted and incremented without
  distance checks; the others are checked entry by entry: a vectorized approximation
  (multiplication by ``1 / st``, relative error < 1e-13) decides where it is farther than a
  relative 1e-12 from ``rho^2``, the documented formula decides the rest (ties included).  A box
  too large to enumerate (extreme coordinates or scales) falls back to bounding every cell;
* the grid is rebuilt (O(N), re-bucketing every entry) only when ``rho st`` of a grid feature
  grows 20% or shrinks by a third since the build, when the level changes, or to compact it
  (same geometry) once cells emptied by evictions outnumber the non-empty ones (+ 4096).
  Blocks grow by 25% and shrink when less than half full.

Memory: ``8 M + 8`` bytes per stored entry (+ up to 25% block slack and ~16 bytes of malloc
header per cell), 8 bytes per storage position, 56 bytes per cell and 16-32 bytes of hash table
per cell.  ``nbytes()`` (which counts all of these, not allocator fragmentation) in
``bench/bench_pseudocount.py`` at N = 10^6: 36 MB for M = 2, 61 MB for M = 4, 95 MB for M = 8
(uniform data, rho = 0.1).  A rebuild allocates the new blocks before freeing the old ones
(transient peak about twice the index).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from sun_lightning.replay import pseudocount_native
from sun_lightning.replay.pseudocount_index import GridIndex, check
from sun_lightning.replay.pseudocount_scale import (RunningMoments, batch_arrays, check_config,
                                                    np_float, np_index, runs_without_repeats,
                                                    sigma_due, st_tensor)

__all__ = ["RadiusPseudocount", "make_radius_pseudocount"]

_XTYPE = {torch.float64: 0, torch.float32: 1}  # dtypes the native single step reads directly


class RadiusPseudocount:
    """Insert-time radius pseudocount over replay-storage positions (see module docstring), a
    :class:`~sun_lightning.replay.counts.Pseudocount`.

    Args:
        goal_dim: M, number of goal features.
        rho: radius in standardized space (``>= 0``).
        capacity: number of storage positions (``index`` values lie in ``[0, capacity)``,
            ``capacity < 2**31``).
        num_actions: if > 0, entries carry a discrete goal action in ``[0, num_actions)`` and
            only entries with the same action are neighbours.
        sigma_every: K, the standardization is recomputed every K inserted samples.
        device: device of the tensors returned by ``counts``/``scale``.

    Raises:
        NativeError: (on construction) no C compiler to build the native index.
    """

    def __init__(self, goal_dim: int, rho: float, capacity: int, num_actions: int = 0,
                 sigma_every: int = 1000, device: str | torch.device = "cpu"):
        (self.goal_dim, self.rho, self.capacity, self.num_actions, self.sigma_every,
         self.device) = check_config(goal_dim, rho, capacity, num_actions, sigma_every, device)
        M = self.goal_dim
        self._n = 0  # stored entries
        self._seen = 0  # samples inserted ever (numbering of step 2)
        self._moments = RunningMoments(M)
        self._sigma = np.zeros(M)
        self._st = np.ones(M)  # read by the native index at every query: updated in place only
        self._make_index()

    def _make_index(self) -> None:
        self._index = GridIndex(self.goal_dim, self.num_actions, self.capacity, self.rho,
                                self._st, self._moments.mom)
        self._h = self._index.h
        self._step = self._index.step
        self._torch_cache: dict = {}

    # ------------------------------------------------------------------ public API
    def __len__(self) -> int:
        return self._n

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """Stored counts n at storage positions ``index`` (int64, on ``self.device``); 0 = empty."""
        idx = np_index(index)
        if len(idx) and idx.min() < 0:  # numpy-style negative positions
            idx = np.where(idx < 0, idx + self.capacity, idx)
        t = torch.from_numpy(self._index.counts(idx))
        if torch.is_tensor(index):
            t = t.reshape(index.shape)
        return t.to(self.device)

    def scale(self) -> torch.Tensor:
        """Current standardization scale st [goal_dim] (float32, on ``self.device``)."""
        return self._st_tensor(torch.float32, self.device).clone()

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        """``x / st`` (same dtype and device as ``x``)."""
        dt = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        return x / self._st_tensor(dt, x.device)

    def insert(self, index: torch.Tensor, x: torch.Tensor,
               action: torch.Tensor | None = None) -> None:
        """Write samples ``x`` [B, M] (actions [B]) at storage positions ``index`` [B]."""
        if (type(index) is torch.Tensor and type(x) is torch.Tensor and index.is_cpu and x.is_cpu
                and index.numel() == 1 and x.numel() == self.goal_dim):
            # one sample (the common per-step case): one native call unless sigma is due
            slot = int(index)
            if slot < 0 or slot >= self.capacity:
                raise IndexError("index out of range [0, capacity)")
            a = self._action_one(action)
            T = self._seen
            if T % self.sigma_every and self._moments.has_c:
                code = _XTYPE.get(x.dtype)
                if code is None or not x.is_contiguous():
                    x, code = x.detach().to(torch.float64).contiguous(), 0
                r = self._step(self._h, slot, x.data_ptr(), code, a)
                if r < 0:
                    check(r)
                self._seen = T + 1
                self._n += 1 - r
                return
            xs = np_float(x).reshape(1, self.goal_dim)
            if not np.isfinite(xs).all():
                raise ValueError("goal features must be finite")
            self._insert(np.array([slot], np.int64), xs,
                         np.array([a], np.int64) if self.num_actions else None)
            return
        idx, xs, a = batch_arrays(index, x, action, self.goal_dim, self.capacity,
                                  self.num_actions)
        if xs is None:  # empty batch
            return
        runs = runs_without_repeats(idx)
        if len(runs) == 1:
            self._insert(idx, xs, a)
            return
        for s, e in runs:  # repeated positions: consecutive runs of distinct positions
            self._insert(idx[s:e], xs[s:e], None if a is None else a[s:e])

    # ------------------------------------------------------------------ diagnostics
    def nbytes(self) -> int:
        """Bytes held by the index (native blocks, cells, hash table, position maps, buffers)."""
        return int(self._index.nbytes() + self._st.nbytes + self._sigma.nbytes
                   + self._moments.mom.nbytes)

    @property
    def rebuilds(self) -> int:
        """Grid rebuilds so far (scale outgrew the slack, cell size change, or compaction)."""
        return self._index.stats()["rebuilds"]

    # ------------------------------------------------------------------ insert
    def _insert(self, idx: np.ndarray, xs: np.ndarray, a: np.ndarray | None) -> None:
        """One batch of distinct positions (steps 1-4 of the module docstring)."""
        B = len(idx)
        T = self._seen
        mom = self._moments
        xe, ae = self._index.evict(idx)
        ne = len(xe)
        if ne:
            mom.add_rows(xe, -1.0)
        mom.add_batch(xs)
        self._n += B - ne
        self._seen = T + B
        if sigma_due(T, B, self.sigma_every):
            self._recompute_sigma(xs)
        if ne:
            self._index.apply(xe, ae if self.num_actions else None, -1)
        self._index.insert(idx, xs, a)

    def _recompute_sigma(self, extra: np.ndarray) -> None:
        """Re-standardize over survivors (in the index) + ``extra`` (the batch, not yet in it)."""
        sigma, st = self._moments.sigma(self._n, lambda: self._index.export()[1], extra)
        self._sigma = sigma
        if not np.array_equal(st, self._st):
            self._st[:] = st
            self._torch_cache = {}
        self._index.ensure_grid(self._st, sigma, self._moments.mean(self._n))

    # ------------------------------------------------------------------ conversions
    def _action_one(self, action) -> int:
        if self.num_actions <= 0:
            if action is not None:
                raise ValueError("action given but num_actions == 0")
            return 0
        if action is None:
            raise ValueError("action is required when num_actions > 0")
        if torch.is_tensor(action):
            if action.numel() != 1:
                raise ValueError("action must have one entry per sample")
            a = int(action)
        else:
            arr = np.asarray(action).reshape(-1)
            if len(arr) != 1:
                raise ValueError("action must have one entry per sample")
            a = int(arr[0])
        if a < 0 or a >= self.num_actions:
            raise ValueError("action out of range [0, num_actions)")
        return a

    def _st_tensor(self, dtype, device) -> torch.Tensor:
        return st_tensor(self._torch_cache, self._st, dtype, device)

    # ------------------------------------------------------------------ pickling / deepcopy
    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_index", "_h", "_step", "_torch_cache")}
        state["_index_state"] = self._index.get_state()
        return state

    def __setstate__(self, state: dict) -> None:
        index_state = state.pop("_index_state")
        self.__dict__.update(state)
        self._make_index()  # C keeps pointers to the restored _st / moments arrays
        self._index.set_state(index_state)


# ---------------------------------------------------------------------- backend choice
BACKENDS = ("auto", "native", "torch")
_native_why: str | None = None  # why the native index is unavailable (first line of the error)


def make_radius_pseudocount(goal_dim: int, rho: float, capacity: int, num_actions: int = 0,
                            sigma_every: int = 1000, device: str | torch.device = "cpu",
                            backend: str = "auto"):
    """The radius pseudocount of SPEC §4 with the chosen implementation (same counts either way).

    Args:
        goal_dim, rho, capacity, num_actions, sigma_every, device: see :class:`RadiusPseudocount`.
        backend: ``"native"`` (:class:`RadiusPseudocount`, the C hash grid), ``"torch"``
            (:class:`~sun_lightning.replay.pseudocount_torch.TorchRadiusPseudocount`, brute
            force on ``device``) or ``"auto"``: native on a CPU device when its library builds,
            else torch (silently on an accelerator; with one warning on a CPU without a C
            compiler).

    Raises:
        ValueError: unknown ``backend``.
        NativeError: ``backend="native"`` and the native index cannot be built.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown pseudocount backend {backend!r}: expected one of "
                         + ", ".join(repr(b) for b in BACKENDS))
    args = (goal_dim, rho, capacity, num_actions, sigma_every, device)
    if backend == "auto":
        backend = "torch"
        if torch.device(device).type == "cpu":
            if _native_available():
                backend = "native"
            else:
                warnings.warn("RadiusPseudocount: using the pure-torch pseudocount "
                              f"(TorchRadiusPseudocount, brute force) because {_native_why}",
                              stacklevel=2)
    if backend == "native":
        return RadiusPseudocount(*args)
    from sun_lightning.replay.pseudocount_torch import TorchRadiusPseudocount

    return TorchRadiusPseudocount(*args)


def _native_available() -> bool:
    """``LIBRARY.available``, its own (multi-line, once) warning folded into the caller's."""
    global _native_why
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = pseudocount_native.LIBRARY.available("The pure-torch pseudocount is used instead.")
    if not ok and (caught or _native_why is None):
        first = str(caught[0].message).splitlines()[0] if caught else ""
        _native_why = first[:300] or "the native index is unavailable"
    return ok
