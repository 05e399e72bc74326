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
accumulated in feature order.  The spatial index only selects candidates, with conservative
margins: every counted pair is either checked with this formula, or lies in a cell that is
entirely inside the ball by a relative margin of 1e-9 (then the formula holds too).  Inputs must
be finite.

Data structure (CPU, numpy; tensors on any device are moved to the CPU at the interface):

* running sums of ``x - c`` and ``(x - c)^2`` (float64, ``c`` a stored data value, so that a
  constant feature has exactly zero spread; re-centred exactly if the mean drifts far from ``c``)
  give ``sigma`` in O(M) at any time, so recomputing it every K inserts costs nothing;
* a uniform grid in raw coordinates over up to four "grid" features (all of them when M <= 4,
  else the four with the largest sigma / st): "row" cells of side ``1.25 rho st / sub``
  (sub = 4, 2, 1 for M = 2, 3, >= 4) and a "fine" feature quantised at ``rho st / 16``.
  Entries live in one array sorted by the packed key (action | row cells | fine cell), together
  with their coordinates ([M, N]) and counts, so a row of cells is one contiguous range.  A query
  looks up, in a table precomputed for its sub-cell position, the rows that can hold neighbours
  and conservative fine-cell ranges of the ball's chord in each row, then binary-searches them.
  When M <= 4 and a query has many candidates, cells entirely inside the ball are counted by
  range length and incremented without distance checks ("interior"); only boundary cells are
  checked.  A batch applies dense interior increments through a difference array;
* recent entries live in a small unsorted tail scanned by brute force, merged into the sorted
  array every ~sqrt(5 N) inserts (a stable sort of the concatenation, O(N));
* cells are built for the ``st`` of build time and queried with the current ``st`` (exact for any
  ``st``; only speed depends on it): re-standardization needs no rebuild until ``rho st`` grows
  20% or shrinks by a third (cells are built with 25% slack); the needle tables are rebuilt
  (~1 ms) when ``st`` moves by more than 1%;
* evicted entries of the sorted array become tombstones (NaN coordinates) until the next merge;
  cells with aliased keys (coordinates beyond 2**(bits-1) cells from the mean) fall back to a
  general vectorized path that handles wrap-around.

Memory: (8 M + 20) bytes per stored entry (key, position, coordinates, count) + 5 bytes per
storage position + the tail (<= 8192 entries) and the needle tables (< 1 MB): 41 MB for M = 2
and 90 MB for M = 8 at N = 10^6.  A merge allocates the new arrays before freeing the old ones
(one feature at a time for the coordinates), so the transient peak is about twice the key,
position and count arrays plus the coordinates (~150 MB for M = 8 at 10^6).
"""

from __future__ import annotations

import bisect
import itertools
import math

import numpy as np
import torch

__all__ = ["RadiusPseudocount"]

_REL = 1e-9  # relative safety margin of the spatial filter (never affects the exact test)
_ABS = 1e-12  # absolute margin of the general path, relative to coordinate magnitudes
_CELL_SLACK = 1.25  # row cells are built this much wider than rho * st / sub ...
_GROW_MAX = 1.2  # ... so the index is rebuilt only once rho * st grows 20% (or shrinks 1/3)
_ST_TOL = 0.01  # needle tables stay valid while st is within 1% of the st they were built for
_DELTA = 1e-5  # margin (in cell units) of the tables against floating-point rounding
_SUB1 = 4  # row cells per radius for M = 2
_SPLIT = 1024  # candidates above which a single query counts interior cells without checks
_EMPTY = np.empty(0, np.int64)


_ONES: dict = {}


def _ones(n: int, dtype=torch.int32) -> torch.Tensor:
    """A view of n ones (cached buffer)."""
    buf = _ONES.get(dtype)
    if buf is None or len(buf) < n:
        buf = _ONES[dtype] = torch.ones(max(n, 2 * len(buf) if buf is not None else 1 << 16), dtype=dtype)
    return buf[:n]


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(s, s + l)`` over all (s, l) (zero lengths allowed)."""
    total = int(lengths.sum())
    if total == 0:
        return _EMPTY
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    shift += np.arange(total)
    return shift


class _Grid:
    """Cell geometry + key packing (built for one ``st``; valid for any ``st``).

    Cell coordinates are packed modulo 2**bits: distant cells may alias to the same key, which
    only adds candidates (every candidate is checked), and a fine range that wraps around is split.
    """

    key_bits = 62  # lowered in tests to force aliasing / wrap-around

    def __init__(self, st: np.ndarray, sigma: np.ndarray, mean: np.ndarray, rho: float,
                 num_actions: int):
        M = len(st)
        ratio = sigma / st
        order = np.argsort(-ratio, kind="stable")
        D = min(M, 4)
        dims = order[:D]
        self.full = D == M  # grid covers every feature: interior cells are exact
        self.qdim = int(dims[0])
        self.rdims = np.asarray(dims[1:], np.int64)
        nr = D - 1
        r = max(rho, 1e-9) * st
        self.r_build = r[dims].copy()
        sub = {0: 1, 1: _SUB1, 2: 2, 3: 1}[nr]
        self.L = r[self.rdims] * _CELL_SLACK / sub
        self.Lq = float(r[self.qdim] / 16.0)
        ba = (num_actions - 1).bit_length() if num_actions > 1 else 0
        avail = self.key_bits - ba
        br = avail // D if nr else 0
        self.bq = avail - br * nr
        self.br = br
        self.mask_q = (1 << self.bq) - 1
        self.mask_r = (1 << br) - 1
        self.shifts = np.array([self.bq + k * br for k in range(nr)], np.int64)
        self.shift_a = avail
        # cell index = floor((x - o) / L) + off: the mean sits mid-range of the packed field
        self.o_r = mean[self.rdims].copy()
        self.off_r = (1 << (br - 1)) if br else 0
        self.o_q = float(mean[self.qdim])
        self.off_q = 1 << (self.bq - 1)
        # True while every keyed entry had in-range (non-aliased) cells: then a key range of an
        # in-range query cell holds exactly that cell's entries, and interior counting is exact
        self.clean = True
        self._off_cache: dict = {}

    def offsets(self, counts: tuple) -> np.ndarray:
        off = self._off_cache.get(counts)
        if off is None:
            off = np.array(list(itertools.product(*[range(c) for c in counts])), np.int64)
            self._off_cache[counts] = off
        return off

    def keys(self, x: np.ndarray, a: np.ndarray | None) -> np.ndarray:
        """Keys of points ``x`` [n, M] (actions ``a`` [n])."""
        return self.keys_cols(lambda d: x[:, d], a)

    def keys_cols(self, col, a: np.ndarray | None) -> np.ndarray:
        """Keys from ``col(d)``, the 1-D coordinates of feature d (grid features only)."""
        q = np.floor((col(self.qdim) - self.o_q) / self.Lq)
        q = np.clip(q, -2.0 ** 61, 2.0 ** 61).astype(np.int64) + self.off_q
        if self.clean and len(q) and (q.min() < 0 or q.max() > self.mask_q):
            self.clean = False
        key = q & self.mask_q
        for k, d in enumerate(self.rdims):
            c = np.floor((col(d) - self.o_r[k]) / self.L[k])
            c = np.clip(c, -2.0 ** 61, 2.0 ** 61).astype(np.int64) + self.off_r
            if self.clean and len(c) and (c.min() < 0 or c.max() > self.mask_r):
                self.clean = False
            key |= (c & self.mask_r) << self.shifts[k]
        if a is not None:
            key |= a << self.shift_a
        return key


class _Tables:
    """Relative search needles for every sub-cell position of a query (conservative).

    A query's row cells are ``c_k + j_k`` (j_k in [-J_k, J_k]) and its fine cell ``cq``; its
    position inside its own cells is binned (``nb`` bins per row feature, ``nbq`` for the fine
    one).  For every bin, the table lists the rows that can hold neighbours (valid rows first, in
    key order) and, per row, four key offsets relative to ``sum_k c_k << shift_k + cq``: outer
    start, inner start, inner end, outer end (all ``searchsorted(..., "left")`` needles).
    Outer ranges contain every point within ``rho (1 + REL)`` for any st within ``_ST_TOL`` of
    the build st; inner ranges only cells entirely within ``rho (1 - REL)`` for any such st.
    """

    def __init__(self, g: _Grid, st: np.ndarray, rho: float):
        self.st_b = st.copy()
        self.grid = g
        self.version = -1
        nr = len(g.rdims)
        tol = 1 + _ST_TOL
        rad_out = rho * (1 + _REL) * tol
        rad_in = rho * (1 - _REL) / tol
        self.nb = nb = {0: 1, 1: 16, 2: 8, 3: 4}[nr]
        self.nbq = nbq = 4
        L = g.L
        A = L / st[g.rdims]  # cell units -> standardized
        J = np.ceil(rad_out / A + _DELTA).astype(np.int64) if nr else np.zeros(0, np.int64)
        self.J = J
        combos = list(itertools.product(*[range(-j, j + 1) for j in J]))
        jj = np.array(combos, np.int64).reshape(len(combos), nr)  # [R0, nr]
        rowpre0 = (jj << g.shifts).sum(-1) if nr else np.zeros(len(jj), np.int64)
        srt = np.argsort(rowpre0, kind="stable")
        jj, rowpre0 = jj[srt], rowpre0[srt]
        combos = list(itertools.product(*[range(nb)] * nr))
        bb = np.array(combos, np.int64).reshape(len(combos), nr)  # [NB, nr]
        jf = jj[None].astype(np.float64)  # [1, R0, nr]
        blo = (bb / nb)[:, None, :]  # [NB, 1, nr]
        bhi = ((bb + 1) / nb)[:, None, :]
        gap = np.where(jf > 0, jf - bhi, np.where(jf < 0, -jf - 1 + blo, 0.0)) - _DELTA
        gap = np.maximum(gap, 0.0) * A
        far = np.where(jf > 0, jf + 1 - blo, np.where(jf < 0, -jf + bhi, np.maximum(bhi, 1 - blo)))
        far = (far + _DELTA) * A
        d2 = (gap * gap).sum(-1)  # [NB, R0]
        d2in = (far * far).sum(-1)
        valid = d2 <= rad_out ** 2
        order = np.argsort(~valid, axis=1, kind="stable")  # valid rows first, in key order
        d2 = np.take_along_axis(d2, order, 1)
        d2in = np.take_along_axis(d2in, order, 1)
        valid = np.take_along_axis(valid, order, 1)
        self.Rb_r = valid.sum(1)
        R = max(int(self.Rb_r.max()), 1)
        d2, d2in, valid, order = d2[:, :R], d2in[:, :R], valid[:, :R], order[:, :R]
        rowpre = rowpre0[order]  # [NB, R]
        Bq = st[g.qdim] / g.Lq  # standardized -> fine-cell units
        w = Bq * np.sqrt(np.maximum(rad_out ** 2 - d2, 0.0)) + _DELTA
        win = Bq * np.sqrt(np.maximum(rad_in ** 2 - d2in, 0.0)) - _DELTA
        inner_ok = (d2in < rad_in ** 2) & (win > 0) & valid
        TT = np.zeros((len(bb), nbq, R, 4), np.int64)
        for q in range(nbq):
            flo, fhi = q / nbq, (q + 1) / nbq
            lo = np.floor(flo - w).astype(np.int64)
            hi1 = np.floor(fhi + w).astype(np.int64) + 1
            ilo = np.floor(fhi - win).astype(np.int64) + 1
            ihi1 = np.floor(flo + win).astype(np.int64)
            ok = inner_ok & (ilo < ihi1)
            ilo = np.where(ok, ilo, lo)
            ihi1 = np.where(ok, ihi1, lo)
            t = np.stack((lo, ilo, ihi1, hi1), -1) + rowpre[..., None]
            # padding rows repeat the last valid row's end: empty and in key order
            last = np.take_along_axis(t[..., 3], np.maximum(self.Rb_r - 1, 0)[:, None], 1)
            TT[:, q] = np.where(valid[..., None], t, last[..., None])
        TT = TT.reshape(len(bb) * nbq, R, 4)
        self.TT = TT
        self.TT2 = TT.reshape(len(TT), -1)
        self.TTo2 = np.ascontiguousarray(TT[:, :, 0::3]).reshape(len(TT), -1)  # outer only
        self.TTi2 = np.ascontiguousarray(TT[:, :, 1:3]).reshape(len(TT), -1)  # inner only
        self.Rb = np.repeat(self.Rb_r, nbq)
        self.Rb_list = self.Rb.tolist()
        self.qmin = int(np.floor(-w.max() - 1))  # cq + qmin >= 0 needed
        self.qmax = int(np.floor(1 + w.max())) + 1  # cq + qmax - 1 <= mask_q needed
        self.J_list = J.tolist()
        # |u - u_exact| <= (|x| + |o|) / L * 3.5e-16 must stay below _DELTA / 8 cell units
        lims = [(_DELTA / 8) * float(Lk) / 3.5e-16 - abs(float(ok)) for Lk, ok in zip(L, g.o_r)]
        lims.append((_DELTA / 8) * g.Lq / 3.5e-16 - abs(g.o_q))
        self.xlim = min(lims)
        self.rd = [int(d) for d in g.rdims]
        self.qd = g.qdim
        self.o_r = [float(v) for v in g.o_r]
        self.L = [float(v) for v in L]
        self.shifts = [int(v) for v in g.shifts]
        self.o_q = g.o_q
        self.Lq = g.Lq
        self.off_r = g.off_r
        self.off_q = g.off_q
        self.mask_r = g.mask_r
        self.mask_q = g.mask_q
        self.shift_a = g.shift_a

    def valid_for(self, st: np.ndarray) -> bool:
        r = st / self.st_b
        return bool(r.max() <= 1 + _ST_TOL and r.min() >= 1 / (1 + _ST_TOL))


class RadiusPseudocount:
    """Insert-time radius pseudocount over replay-storage positions (see module docstring).

    Args:
        goal_dim: M, number of goal features.
        rho: radius in standardized space (``>= 0``).
        capacity: number of storage positions (``index`` values lie in ``[0, capacity)``).
        num_actions: if > 0, entries carry a discrete goal action in ``[0, num_actions)`` and
            only entries with the same action are neighbours.
        sigma_every: K, the standardization is recomputed every K inserted samples.
        device: device of the tensors returned by ``counts``/``scale``.
        tail_max: upper bound of the brute-forced tail of recent entries (tuning knob).
    """

    def __init__(self, goal_dim: int, rho: float, capacity: int, num_actions: int = 0,
                 sigma_every: int = 1000, device: str | torch.device = "cpu",
                 tail_max: int | None = None):
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
        self.goal_dim = M = int(goal_dim)
        self.rho = float(rho)
        self._rho2 = self.rho * self.rho
        self.capacity = int(capacity)
        self.num_actions = int(num_actions)
        self.sigma_every = int(sigma_every)
        self.device = torch.device(device)
        self.tail_max = int(tail_max) if tail_max else 8192

        # storage position -> where its entry lives (0 empty, 1 sorted array, 2 tail) and where
        self._where = np.zeros(self.capacity, np.int8)
        self._pos = np.zeros(self.capacity, np.int32 if self.capacity < 2 ** 31 else np.int64)

        # running moments (shifted by c, a stored data value), python floats
        self._n = 0
        self._seen = 0
        self._c: list | None = None
        self._S1 = [0.0] * M
        self._S2 = [0.0] * M
        self._sigma = np.zeros(M)
        self._set_st(np.ones(M))
        self._st_version = 0

        # sorted array: keys, storage positions (-1: tombstone), coordinates [M, N], counts
        self._grid: _Grid | None = None
        self._tables: _Tables | None = None
        self._mkey = _EMPTY
        self._mslot = _EMPTY
        self._mx = np.empty((M, 0))
        self._mcnt = np.empty(0, np.int32)
        self._dead_reset()

        # tail (coordinates are [M, T])
        self._tn = 0
        self._tcap = 0
        self._tx = np.empty((M, 0))
        self._ta = _EMPTY
        self._tslot = _EMPTY
        self._tcnt = np.empty(0, np.int32)
        self._tgrow(min(self.tail_max, 1024))
        self._tail_limit = min(self.tail_max, 256)

        self.rebuilds = 0
        self.merges = 0

    # ------------------------------------------------------------------ public API
    def __len__(self) -> int:
        return self._n

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """Stored counts n at storage positions ``index`` (int64, on ``self.device``); 0 = empty."""
        idx = self._np_index(index)
        w = self._where[idx]
        p = self._pos[idx]
        out = np.zeros(len(idx), np.int64)
        m = w == 1
        if m.any():
            out[m] = self._mcnt[p[m]]
        m = w == 2
        if m.any():
            out[m] = self._tcnt[p[m]]
        t = torch.from_numpy(out)
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
        if (isinstance(index, torch.Tensor) and index.is_cpu and index.numel() == 1
                and isinstance(x, torch.Tensor) and x.is_cpu and x.numel() == self.goal_dim):
            # one sample (the common per-step case): scalar conversions
            i0 = int(index)
            if i0 < 0 or i0 >= self.capacity:
                raise IndexError("index out of range [0, capacity)")
            xl = [float(v) for v in x.reshape(-1).tolist()]
            if not all(map(math.isfinite, xl)):
                raise ValueError("goal features must be finite")
            a = None
            if self.num_actions > 0:
                if action is None:
                    raise ValueError("action is required when num_actions > 0")
                a = int(action.reshape(-1)[0]) if isinstance(action, torch.Tensor) else int(np.asarray(action).reshape(-1)[0])
                if a < 0 or a >= self.num_actions:
                    raise ValueError("action out of range [0, num_actions)")
            elif action is not None:
                raise ValueError("action given but num_actions == 0")
            self._insert_one(i0, np.array(xl), xl, a)
            return
        idx = self._np_index(index)
        B = len(idx)
        if B == 0:
            return
        xs = self._np_float(x).reshape(B, self.goal_dim)
        if B == 1:
            i0 = int(idx[0])
            if i0 < 0 or i0 >= self.capacity:
                raise IndexError("index out of range [0, capacity)")
            xl = xs[0].tolist()
            if not all(map(math.isfinite, xl)):
                raise ValueError("goal features must be finite")
        else:
            if idx.min() < 0 or idx.max() >= self.capacity:
                raise IndexError("index out of range [0, capacity)")
            if not np.isfinite(xs).all():
                raise ValueError("goal features must be finite")
        if self.num_actions > 0:
            if action is None:
                raise ValueError("action is required when num_actions > 0")
            a = self._np_index(action)
            if len(a) != B:
                raise ValueError("action must have one entry per sample")
            if a.min() < 0 or a.max() >= self.num_actions:
                raise ValueError("action out of range [0, num_actions)")
        else:
            if action is not None:
                raise ValueError("action given but num_actions == 0")
            a = None
        if B == 1:
            self._insert_one(i0, xs[0], xl, None if a is None else int(a[0]))
            return
        if len(np.unique(idx)) < B:  # repeated positions: consecutive unique runs
            start, seen = 0, set()
            for i, v in enumerate(idx.tolist()):
                if v in seen:
                    self._insert(idx[start:i], xs[start:i], None if a is None else a[start:i])
                    start, seen = i, set()
                seen.add(v)
            self._insert(idx[start:], xs[start:], None if a is None else a[start:])
            return
        self._insert(idx, xs, a)

    # ------------------------------------------------------------------ diagnostics
    def nbytes(self) -> int:
        """Bytes held by the index (keys, coordinates, counts, maps, tail, tables)."""
        arrs = [self._where, self._pos, self._mkey, self._mslot, self._mx, self._mcnt,
                self._dead_arr(), self._tx, self._ta, self._tslot, self._tcnt]
        n = sum(a.nbytes for a in arrs)
        if self._tables is not None:
            t = self._tables
            n += t.TT.nbytes + t.TTo2.nbytes + t.TTi2.nbytes
        return int(n)

    # ------------------------------------------------------------------ conversions
    @staticmethod
    def _np_index(t) -> np.ndarray:
        if torch.is_tensor(t):
            t = t.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            a = t.numpy()
            return (a if a.dtype == np.int64 else a.astype(np.int64)).reshape(-1)
        return np.asarray(t, np.int64).reshape(-1)

    @staticmethod
    def _np_float(t) -> np.ndarray:
        if torch.is_tensor(t):
            t = t.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            if t.dtype in (torch.bfloat16, torch.float16):
                t = t.float()
            return t.numpy().astype(np.float64)
        return np.array(t, np.float64)

    def _st_tensor(self, dtype, device) -> torch.Tensor:
        key = (dtype, str(device))
        hit = self._torch_cache.get(key)
        if hit is None or hit[0] != self._st_version:
            hit = (self._st_version, torch.as_tensor(self._st, dtype=dtype, device=device))
            self._torch_cache[key] = hit
        return hit[1]

    # ------------------------------------------------------------------ sigma
    def _set_st(self, st: np.ndarray) -> None:
        self._st = st
        self._stc = st[:, None].copy()
        self._st_list = st.tolist()
        self._rq_tail = (self.rho * (1 + _REL) * st).tolist()  # tail prefilter half-widths
        self._torch_cache: dict = {}

    def _mean(self) -> np.ndarray:
        return np.array(self._c) + np.array(self._S1) / max(self._n, 1)

    def _recompute_sigma(self, extra: np.ndarray) -> None:
        n = self._n
        S1, S2 = np.array(self._S1), np.array(self._S2)
        m1 = S1 / n
        var = S2 / n - m1 * m1
        far = (m1 * m1 > 16.0 * np.maximum(var, 0.0)) & (S2 > 0)
        if far.any() and n > 1:
            self._recenter(extra)
            S1, S2 = np.array(self._S1), np.array(self._S2)
            m1 = S1 / n
            var = S2 / n - m1 * m1
        sigma = np.where(S2 > 0, np.sqrt(np.maximum(var, 0.0)), 0.0)
        st = np.maximum(sigma, np.median(sigma))
        st[st == 0] = 1.0
        self._sigma = sigma
        if not np.array_equal(st, self._st):
            self._set_st(st)
            self._st_version += 1
        self._check_grid()

    def _live_coords(self) -> np.ndarray:
        """Coordinates [M, n] of every stored entry (sorted array + tail)."""
        live = self._mslot >= 0
        tl = self._tslot[: self._tn] >= 0
        return np.concatenate((self._mx[:, live], self._tx[:, : self._tn][:, tl]), 1)

    def _recenter(self, extra: np.ndarray) -> None:
        """Exact moments with a new shift: the stored value closest to the mean (per feature)."""
        X = np.concatenate((self._live_coords(), extra.T), 1)  # [M, n]
        mean = X.mean(1)
        c = X[np.arange(self.goal_dim), np.argmin(np.abs(X - mean[:, None]), axis=1)]
        d = X - c[:, None]
        self._c = c.tolist()
        self._S1 = d.sum(1).tolist()
        self._S2 = (d * d).sum(1).tolist()

    def _moments_add(self, x: np.ndarray, sign: float) -> None:
        if self._c is None:
            self._c = x[0].tolist()
        d = x - np.array(self._c)
        s1 = (sign * d.sum(0)).tolist()
        s2 = (sign * (d * d).sum(0)).tolist()
        self._S1 = [u + v for u, v in zip(self._S1, s1)]
        self._S2 = [u + v for u, v in zip(self._S2, s2)]

    # ------------------------------------------------------------------ index maintenance
    def _new_grid(self) -> _Grid:
        return _Grid(self._st, self._sigma, self._mean(), self.rho, self.num_actions)

    def _tables_now(self) -> _Tables:
        t = self._tables
        if t is None or t.grid is not self._grid or (
                t.version != self._st_version and not t.valid_for(self._st)):
            t = self._tables = _Tables(self._grid, self._st, self.rho)
        t.version = self._st_version
        return t

    def _check_grid(self) -> None:
        if len(self._mkey) == 0:
            self._grid = None  # built lazily at the next merge, for the current st
            return
        g = self._grid
        r = max(self.rho, 1e-9) * self._st[np.concatenate(([g.qdim], g.rdims))]
        ratio = r / g.r_build
        if ratio.max() > _GROW_MAX or ratio.min() < 1 / 1.5:
            self._rebuild()

    def _actions_of(self, keys: np.ndarray) -> np.ndarray | None:
        return (keys >> self._grid.shift_a) if self.num_actions else None

    def _set_sorted(self, keys, slots, x, cnt, moved=None) -> None:
        self._mkey, self._mslot, self._mx, self._mcnt = keys, slots, x, cnt
        self._where[slots if moved is None else moved] = 1
        self._pos[slots] = np.arange(len(slots), dtype=self._pos.dtype)
        self._dead_reset()
        self._tn = 0
        if self._tcap > 2 * self.tail_max:
            self._tgrow(self.tail_max, shrink=True)
        # balance the O(N) merge against the O(tail) scan per insert
        self._tail_limit = max(min(self.tail_max, 256), min(self.tail_max, int(math.sqrt(5 * len(keys)))))

    def _tail_live(self):
        tn = self._tn
        live = np.flatnonzero(self._tslot[:tn] >= 0)
        return (self._tx[:, live], self._ta[live] if self.num_actions else None,
                self._tslot[live], self._tcnt[live])

    def _rebuild(self) -> None:
        """Re-key every live entry with a grid for the current st (tail emptied)."""
        self.rebuilds += 1
        live = np.flatnonzero(self._mslot >= 0)
        ma = self._actions_of(self._mkey[live])
        tx, ta, ts, tc = self._tail_live()
        a = None if ma is None else np.concatenate((ma, ta))
        slots = np.concatenate((self._mslot[live], ts))
        cnt = np.concatenate((self._mcnt[live], tc))
        self._grid = g = self._new_grid()

        def col(d):
            return np.concatenate((self._mx[d].take(live), tx[d]))

        keys = g.keys_cols(col, a)
        order = np.argsort(keys, kind="stable")
        x = np.empty((self.goal_dim, len(order)))
        for m in range(self.goal_dim):  # feature by feature: small transient memory
            col(m).take(order, out=x[m])
        self._set_sorted(keys[order], slots[order], x, cnt[order])

    def _merge(self) -> None:
        """Move the tail into the sorted array and drop tombstones."""
        self.merges += 1
        if self._grid is None:
            self._grid = self._new_grid()
        tx, ta, ts, tc = self._tail_live()
        tk = self._grid.keys(tx.T, ta)
        keys = np.concatenate((self._mkey, tk))
        order = np.argsort(keys, kind="stable")
        if self._dead_n:
            keep = np.ones(len(keys), bool)
            keep[self._dead_arr()] = False
            order = order[keep[order]]
        x = np.empty((self.goal_dim, len(order)))
        for m in range(self.goal_dim):  # feature by feature: small transient memory
            np.concatenate((self._mx[m], tx[m])).take(order, out=x[m])
        self._set_sorted(keys[order], np.concatenate((self._mslot, ts))[order], x,
                         np.concatenate((self._mcnt, tc))[order], moved=ts)

    def _tgrow(self, need: int, shrink: bool = False) -> None:
        new = max(need, min(self.tail_max, 1024)) if shrink else max(need, 2 * self._tcap)
        tn = self._tn
        tx = np.full((self.goal_dim, new), np.nan)
        tx[:, :tn] = self._tx[:, :tn]
        ta = np.zeros(new, np.int64)
        ta[:tn] = self._ta[:tn]
        ts = np.full(new, -1, np.int64)
        ts[:tn] = self._tslot[:tn]
        tc = np.zeros(new, np.int32)
        tc[:tn] = self._tcnt[:tn]
        self._tx, self._ta, self._tslot, self._tcnt, self._tcap = tx, ta, ts, tc, new

    def _dead_reset(self) -> None:
        self._dead: list = []  # sorted positions of the tombstones of the sorted array
        self._dead_cache = _EMPTY
        self._dead_n = 0

    def _dead_add(self, positions: list) -> None:
        if len(positions) == 1:
            bisect.insort(self._dead, positions[0])
        else:
            self._dead = sorted(self._dead + positions)
        self._dead_n = len(self._dead)
        self._dead_cache = None

    def _dead_arr(self) -> np.ndarray:
        """Sorted positions of the tombstones of the sorted array."""
        if self._dead_cache is None:
            self._dead_cache = np.array(self._dead, np.int64)
        return self._dead_cache

    def _evict(self, slots: np.ndarray):
        """Remove the entries at ``slots``; return their coordinates [n, M] and actions."""
        w = self._where[slots]
        p = self._pos[slots]
        xe = np.empty((len(slots), self.goal_dim))
        ae = np.zeros(len(slots), np.int64) if self.num_actions else None
        m = w == 1
        if m.any():
            pm = p[m]
            xe[m] = self._mx[:, pm].T
            if ae is not None:
                ae[m] = self._mkey[pm] >> self._grid.shift_a
            self._mx[:, pm] = np.nan
            self._mslot[pm] = -1
            self._dead_add(pm.tolist())
        m = w == 2
        if m.any():
            pt = p[m]
            xe[m] = self._tx[:, pt].T
            if ae is not None:
                ae[m] = self._ta[pt]
            self._tx[:, pt] = np.nan
            self._tslot[pt] = -1
        self._where[slots] = 0
        return xe, ae

    # ------------------------------------------------------------------ queries (batch)
    def _query_sorted(self, mkey, X, dead, xq, aq, need_pairs: bool):
        """Neighbours of query points ``xq`` [Q, M] in a key-sorted run with coordinates X [M, N].

        Returns (count [Q], interior (lab, start, end) or None, boundary hits (lab, pos) or None).
        ``count`` = interior entries (minus tombstones ``dead``) + boundary neighbours.
        """
        t = self._tables_now()
        g = self._grid
        Q = len(xq)
        if t.rd:
            U = (xq[:, t.rd] - g.o_r) / g.L
            C = np.floor(U)
            if (C.min(0) - t.J).min() + g.off_r < 0 or (C.max(0) + t.J).max() + g.off_r > t.mask_r:
                return self._query_general(mkey, X, dead, xq, aq, need_pairs)
            Bn = np.minimum(((U - C) * t.nb).astype(np.int64), t.nb - 1)
            base = ((C.astype(np.int64) + g.off_r) << g.shifts).sum(1)
            bidx = np.zeros(Q, np.int64)
            for k in range(len(t.rd)):
                bidx = bidx * t.nb + Bn[:, k]
        else:
            base = np.zeros(Q, np.int64)
            bidx = np.zeros(Q, np.int64)
        u = (xq[:, t.qd] - g.o_q) / g.Lq
        c = np.floor(u)
        if (c.min() + (t.qmin + g.off_q) < 0 or c.max() + (t.qmax - 1 + g.off_q) > t.mask_q
                or np.abs(xq).max() >= t.xlim):
            return self._query_general(mkey, X, dead, xq, aq, need_pairs)
        bidx = bidx * t.nbq + np.minimum(((u - c) * t.nbq).astype(np.int64), t.nbq - 1)
        base += c.astype(np.int64) + g.off_q
        if aq is not None:
            base += aq << g.shift_a
        R = int(t.Rb[bidx].max())
        if R == 0:
            return (np.zeros(Q, np.int64), (_EMPTY, _EMPTY, _EMPTY) if need_pairs else None,
                    (_EMPTY, _EMPTY) if need_pairs else None)
        interior = g.full and g.clean
        if interior:
            nd = t.TT[bidx, :R] + base[:, None, None]  # [Q, R, 4]
        else:
            nd = t.TTo2.reshape(len(t.TT), -1, 2)[bidx, :R] + base[:, None, None]  # [Q, R, 2]
        r = self._ss(mkey, nd.ravel(), nd.size > 512).reshape(nd.shape)
        s_out = r[:, :, 0]
        e_out = r[:, :, -1]
        if interior:
            s_in, e_in = r[:, :, 1], r[:, :, 2]
        else:
            s_in = e_in = s_out
        lab_r = np.repeat(np.arange(Q), R)
        inter = None
        if interior:
            count, inter, bs, bl, blab = self._interior_ranges(s_out, s_in, e_in, e_out, lab_r, dead, need_pairs)
        else:
            count = np.zeros(Q, np.int64)
            bs = s_out.ravel()
            bl = (e_out - s_out).ravel()
            blab = lab_r
        pos = _expand(bs, bl)
        lab = np.repeat(blab, bl)
        return self._check_candidates(X, xq, lab, pos, count, inter, need_pairs)

    def _query_general(self, mkey, X, dead, xq, aq, need_pairs: bool):
        """``_query_sorted`` for queries touching aliased / out-of-range / wrapped cells."""
        g = self._grid
        st = self._st
        rho = self.rho
        Q = len(xq)
        nr = len(g.rdims)
        rq = rho * st[g.qdim]
        rho2_out = (rho * (1 + _REL)) ** 2
        rho2_in = (rho * (1 - _REL)) ** 2
        xqq = xq[:, g.qdim]
        mq = _ABS * (np.abs(xqq).max() + abs(g.o_q) + rq) + _REL * rq
        interior = g.full
        ncell = ()
        if nr:
            xr = xq[:, g.rdims]  # [Q, nr]
            st_r = st[g.rdims]
            r_r = rho * st_r
            m_r = _ABS * (np.abs(xr).max(0) + np.abs(g.o_r) + r_r) + _REL * r_r
            reff = r_r + m_r
            ncell = tuple(int(v) for v in (np.floor(2 * reff / g.L * (1 + 1e-9)) + 2))
            off = g.offsets(ncell)  # [R, nr]
            c0 = np.floor((xr - reff - g.o_r) / g.L).astype(np.int64)
            c = c0[:, None, :] + off[None]  # [Q, R, nr] (cells relative to the origin)
            lo_b = g.o_r + c * g.L
            hi_b = lo_b + g.L
            xe = xr[:, None, :]
            gap = np.maximum(np.maximum(lo_b - xe, xe - hi_b) - m_r, 0.0) / st_r
            d2 = (gap * gap).sum(-1)  # [Q, R] lower bound of the row distance^2
            cs = c + g.off_r
            pre = ((cs & g.mask_r) << g.shifts).sum(-1)
            if interior:
                far = (np.maximum(xe - lo_b, hi_b - xe) + m_r) / st_r
                d2in = (far * far).sum(-1)
        else:
            d2 = np.zeros((Q, 1))
            pre = np.zeros((Q, 1), np.int64)
            if interior:
                d2in = d2
        if aq is not None:
            pre = pre | (aq << g.shift_a)[:, None]
        valid = d2 <= rho2_out
        w = st[g.qdim] * np.sqrt(np.maximum(rho2_out - d2, 0.0)) + mq
        xc = xqq[:, None] - g.o_q
        qlo = np.floor((xc - w) / g.Lq).astype(np.int64) + g.off_q
        qhi = np.floor((xc + w) / g.Lq).astype(np.int64) + g.off_q
        full = (qhi - qlo) >= g.mask_q
        lo_m = np.where(full, 0, qlo & g.mask_q)
        hi_m = np.where(full, g.mask_q, qhi & g.mask_q)
        wrap = lo_m > hi_m
        kl = pre | lo_m
        kh = pre | np.where(wrap, g.mask_q, hi_m)
        s_out = np.searchsorted(mkey, kl.ravel(), "left").reshape(kl.shape)
        e_out = np.searchsorted(mkey, kh.ravel(), "right").reshape(kl.shape)
        e_out = np.where(valid, e_out, s_out)
        lab_r = np.repeat(np.arange(Q), s_out.shape[1])
        inter = None
        if interior:
            ok = valid & ~wrap & (d2in < rho2_in) & g.clean & (qlo >= 0) & (qhi <= g.mask_q)
            if nr:
                ok &= ((cs >= 0) & (cs <= g.mask_r)).all(-1)
            win = st[g.qdim] * np.sqrt(np.maximum(rho2_in - d2in, 0.0)) - mq
            ilo = np.floor((xc - win) / g.Lq).astype(np.int64) + (1 + g.off_q)
            ihi = np.floor((xc + win) / g.Lq).astype(np.int64) + (g.off_q - 1)
            ok &= (ilo <= ihi) & (win > 0)
            ilo = np.clip(ilo, qlo, qhi)
            ihi = np.clip(ihi, qlo, qhi)
            s_in = np.searchsorted(mkey, (pre | (ilo & g.mask_q)).ravel(), "left").reshape(kl.shape)
            e_in = np.searchsorted(mkey, (pre | (ihi & g.mask_q)).ravel(), "right").reshape(kl.shape)
            s_in = np.where(ok, np.clip(s_in, s_out, e_out), s_out)
            e_in = np.where(ok, np.clip(e_in, s_in, e_out), s_out)
            count, inter, bs, bl, blab = self._interior_ranges(s_out, s_in, e_in, e_out, lab_r, dead, need_pairs)
        else:
            bs = s_out.ravel()
            bl = (e_out - s_out).ravel()
            blab = lab_r
            count = np.zeros(Q, np.int64)
        if wrap.any():  # second range [0, hi] of rows whose fine range wraps around
            s2 = np.searchsorted(mkey, pre[wrap], "left")
            e2 = np.where(valid[wrap], np.searchsorted(mkey, (pre | hi_m)[wrap], "right"), s2)
            bs = np.concatenate((bs, s2))
            bl = np.concatenate((bl, e2 - s2))
            blab = np.concatenate((blab, np.nonzero(wrap)[0]))
        pos = _expand(bs, bl)
        lab = np.repeat(blab, bl)
        if nr and max(ncell) > g.mask_r + 1:  # query rows alias each other: drop repeats
            u = np.unique(lab * len(mkey) + pos)
            lab, pos = u // len(mkey), u % len(mkey)
        return self._check_candidates(X, xq, lab, pos, count, inter, need_pairs)

    @staticmethod
    def _interior_ranges(s_out, s_in, e_in, e_out, lab_r, dead, need_pairs: bool):
        """Counts of the interior ranges ``[s_in, e_in)`` per query (tombstones excluded) and the
        boundary ranges ``[s_out, s_in)``, ``[e_in, e_out)`` left to check, as (starts, lengths, labels)."""
        il = (e_in - s_in).ravel()
        count = (e_in - s_in).reshape(len(s_out), -1).sum(1)
        if len(dead):
            dn = dead.searchsorted(e_in.ravel()) - dead.searchsorted(s_in.ravel())
            count = count - dn.reshape(len(s_out), -1).sum(1)
        inter = None
        if need_pairs:
            nz = il > 0
            inter = (lab_r[nz], s_in.ravel()[nz], e_in.ravel()[nz])
        bs = np.concatenate((s_out.ravel(), e_in.ravel()))
        bl = np.concatenate(((s_in - s_out).ravel(), (e_out - e_in).ravel()))
        return count, inter, bs, bl, np.concatenate((lab_r, lab_r))

    def _check_candidates(self, X, xq, lab, pos, count, inter, need_pairs: bool):
        """Exact distance test of candidate (query ``lab``, entry ``pos``) pairs; adds hits to ``count``."""
        hit = self._d2_gather(X, pos, xq, lab) <= self._rho2
        lab_h = lab[hit]
        count = count + np.bincount(lab_h, minlength=len(xq))
        if not need_pairs:
            return count, None, None
        if inter is None:
            inter = (_EMPTY, _EMPTY, _EMPTY)
        return count, inter, (lab_h, pos[hit])

    @staticmethod
    def _ss(a: np.ndarray, v: np.ndarray, big: bool) -> np.ndarray:
        if not big:
            return a.searchsorted(v)
        o = np.argsort(v, kind="stable")
        out = np.empty(len(v), np.int64)
        out[o] = a.searchsorted(v[o])
        return out

    def _d2(self, diff) -> np.ndarray:
        """sum_m (diff(m) / st_m) ** 2, in feature order; ``diff(m)`` returns a fresh array."""
        acc = None
        for m, s in enumerate(self._st_list):
            t = diff(m)
            t /= s
            t *= t
            if acc is None:
                acc = t
            else:
                acc += t
        return acc

    def _d2_gather(self, X: np.ndarray, pos: np.ndarray, xq: np.ndarray, lab: np.ndarray):
        """d^2 between X[:, pos] ([M, N] coordinates) and query points xq[lab] ([Q, M])."""
        return self._d2(lambda m: X[m].take(pos) - xq[:, m].take(lab))

    def _d2_pairs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """sum_m ((a[m] - b[m]) / st_m) ** 2 over the leading axis, in feature order."""
        return self._d2(lambda m: a[m] - b[m])

    def _d2_point(self, a: np.ndarray, xl: list) -> np.ndarray:
        """sum_m ((a[m] - x_m) / st_m) ** 2 for coordinates a [M, n] and one point x."""
        if self.goal_dim <= 4:
            return self._d2(lambda m: a[m] - xl[m])
        d = (a - np.array(xl)[:, None]) / self._stc
        d *= d
        return d.sum(0)

    def _tail_dim(self) -> int:
        return self._grid.qdim if self._grid is not None else int(np.argmax(self._sigma / self._st))

    def _query_tail(self, xq, aq):
        """Brute-force neighbours in the tail: (query label, tail row)."""
        tn = self._tn
        qd = self._tail_dim()
        m = np.abs(self._tx[qd, :tn][None, :] - xq[:, qd, None]) <= self._rq_tail[qd]
        if aq is not None:
            m &= self._ta[None, :tn] == aq[:, None]
        lab, rows = np.nonzero(m)
        if len(rows):
            hit = self._d2_gather(self._tx, rows, xq, lab) <= self._rho2
            lab, rows = lab[hit], rows[hit]
        return lab, rows

    def _intra(self, x, a) -> np.ndarray:
        """For each batch sample: number of *other* batch samples within rho."""
        B = len(x)
        if B <= 256:
            xt = x.T
            m = self._d2_pairs(xt[:, :, None], xt[:, None, :]) <= self._rho2
            if a is not None:
                m &= a[:, None] == a[None, :]
            return m.sum(1) - 1
        # self-join through a temporary sorted run
        saved = self._grid
        if saved is None:
            self._grid = self._new_grid()
        try:
            keys = self._grid.keys(x, a)
            order = np.argsort(keys, kind="stable")
            skeys = keys[order]
            xs = np.ascontiguousarray(x[order].T)
            out = np.zeros(B, np.int64)
            chunk = self._chunk()
            for s in range(0, B, chunk):
                sl = slice(s, s + chunk)
                cnt, _, _ = self._query_sorted(skeys, xs, _EMPTY, x[sl],
                                               None if a is None else a[sl], False)
                out[sl] = cnt
        finally:
            self._grid = saved
        return out - 1

    def _chunk(self) -> int:
        # queries per vectorized pass: keeps the candidate arrays cache-sized
        t = self._tables_now()
        return max(16, min(1024, (1 << 14) // max(1, int(t.Rb.max()))))

    # ------------------------------------------------------------------ insert (batch)
    def _insert(self, idx: np.ndarray, xs: np.ndarray, a: np.ndarray | None) -> None:
        B = len(idx)
        T = self._seen
        em = self._where[idx] > 0
        ne = int(em.sum())
        if ne:
            xe, ae = self._evict(idx[em])
            self._n -= ne
            self._moments_add(xe, -1.0)
        self._moments_add(xs, +1.0)
        self._n += B
        self._seen = T + B
        K = self.sigma_every
        if (T + B - 1) // K > (T - 1) // K:
            self._recompute_sigma(xs)

        Qn = ne + B
        if self._tn and Qn > 256:
            self._merge()
        if ne:
            xq = np.concatenate((xe, xs))
            aq = None if a is None else np.concatenate((ae, a))
            sign = np.concatenate((np.full(ne, -1, np.int32), np.ones(B, np.int32)))
        else:
            xq, aq, sign = xs, a, None
        newc = np.ones(B, np.int64)
        Nm = len(self._mkey)
        if Nm:
            dead = self._dead_arr()
            mcnt_t = torch.from_numpy(self._mcnt)
            diff = None
            chunk = self._chunk()
            for s in range(0, Qn, chunk):
                e = min(Qn, s + chunk)
                cnt, inter, (blab, bpos) = self._query_sorted(
                    self._mkey, self._mx, dead, xq[s:e], None if aq is None else aq[s:e], True)
                lo = max(ne - s, 0)
                if lo < len(cnt):
                    newc[s + lo - ne: e - ne] += cnt[lo:]
                sg = None if sign is None else sign[s:e]
                ilab, i0, i1 = inter
                if len(ilab):
                    ln = i1 - i0
                    if diff is not None or int(ln.sum()) > Nm:
                        # dense: a difference array over positions, applied once
                        if diff is None:
                            diff = torch.zeros(Nm + 1, dtype=torch.int64)
                        v = (_ones(len(i0), torch.int64) if sg is None
                             else torch.from_numpy(sg[ilab].astype(np.int64)))
                        diff.index_add_(0, torch.from_numpy(i0), v)
                        diff.index_add_(0, torch.from_numpy(i1), -v)
                    else:
                        pos = _expand(i0, ln)
                        v = (_ones(len(pos)) if sg is None
                             else torch.from_numpy(np.repeat(sg[ilab], ln)))
                        mcnt_t.index_add_(0, torch.from_numpy(pos), v)
                if len(bpos):
                    v = (_ones(len(bpos)) if sg is None
                         else torch.from_numpy(sg[blab]))
                    mcnt_t.index_add_(0, torch.from_numpy(bpos), v)
            if diff is not None:
                mcnt_t += torch.cumsum(diff[:Nm], 0).to(torch.int32)
        if self._tn:
            lab, rows = self._query_tail(xq, aq)
            if len(rows):
                if sign is None:
                    v = _ones(len(rows))
                    newc += np.bincount(lab, minlength=B)
                else:
                    v = torch.from_numpy(sign[lab])
                    newc += np.bincount(lab[lab >= ne] - ne, minlength=B)
                torch.from_numpy(self._tcnt).index_add_(0, torch.from_numpy(rows), v)
        newc += self._intra(xs, a)

        tn = self._tn
        if tn + B > self._tcap:
            self._tgrow(tn + B)
        self._tx[:, tn: tn + B] = xs.T
        if a is not None:
            self._ta[tn: tn + B] = a
        self._tslot[tn: tn + B] = idx
        self._tcnt[tn: tn + B] = newc
        self._where[idx] = 2
        self._pos[idx] = np.arange(tn, tn + B)
        self._tn = tn + B
        if self._tn >= self._tail_limit:
            self._merge()

    # ------------------------------------------------------------------ insert (one sample)
    def _candidates_one(self, xl: list, a: int | None):
        """Sorted-array candidates of one query point (table-driven).

        Returns (positions to check exactly, position ranges inside the ball (tombstones
        included), number of live entries among the latter) or None when the query touches aliased /
        out-of-range cells (the general path is used then).
        """
        t = self._tables_now()
        floor = math.floor
        base = 0
        bidx = 0
        nb = t.nb
        for k, d in enumerate(t.rd):
            u = (xl[d] - t.o_r[k]) / t.L[k]
            c = floor(u)
            b = int((u - c) * nb)
            bidx = bidx * nb + (b if b < nb else nb - 1)
            c += t.off_r
            J = t.J_list[k]
            if c - J < 0 or c + J > t.mask_r:
                return None
            base += c << t.shifts[k]
        u = (xl[t.qd] - t.o_q) / t.Lq
        c = floor(u)
        b = int((u - c) * t.nbq)
        bidx = bidx * t.nbq + (b if b < t.nbq else t.nbq - 1)
        c += t.off_q
        if c + t.qmin < 0 or c + t.qmax - 1 > t.mask_q:
            return None
        if max(xl) >= t.xlim or -min(xl) >= t.xlim:
            return None
        base += c
        if a is not None:
            base += a << t.shift_a
        R = t.Rb_list[bidx]
        if R == 0:
            return _EMPTY, None, 0
        g = self._grid
        mkey = self._mkey
        r = mkey.searchsorted(t.TTo2[bidx, :2 * R] + base)
        s_out = r[0::2]
        e_out = r[1::2]
        ln = e_out - s_out
        if not (g.full and g.clean) or ln.sum() <= _SPLIT:  # check every candidate
            return _expand(s_out, ln), None, 0
        # many candidates: cells entirely inside the ball are counted without checks
        r = mkey.searchsorted(t.TTi2[bidx, :2 * R] + base)
        s_in = r[0::2]
        e_in = r[1::2]
        bs = np.concatenate((s_out, e_in))
        cand = _expand(bs, np.concatenate((s_in, e_out)) - bs)
        inner = [(i, j) for i, j in zip(s_in.tolist(), e_in.tolist()) if j > i]
        n_in = sum(j - i for i, j in inner)
        if self._dead_n:  # tombstones inside the interior ranges
            dead = self._dead
            bl = bisect.bisect_left
            n_in -= sum(bl(dead, j) - bl(dead, i) for i, j in inner)
        return cand, inner, n_in

    def _apply_one(self, xl: list, x: np.ndarray, a: int | None, sign: int) -> int:
        """Add ``sign`` to the count of every stored neighbour of x; return their number."""
        total = 0
        cand = _EMPTY
        if len(self._mkey):
            res = self._candidates_one(xl, a)
            if res is None:
                cnt, inter, (blab, bpos) = self._query_sorted(
                    self._mkey, self._mx, self._dead_arr(), x[None],
                    None if a is None else np.array([a], np.int64), True)
                total += int(cnt[0])
                cand = np.concatenate((_expand(inter[1], inter[2] - inter[1]), bpos))
                if len(cand):
                    self._mcnt[cand] += sign
                cand = _EMPTY
            else:
                cand, inner, n_in = res
                if inner is not None:  # interior ranges: no distance check
                    total += n_in
                    mcnt = self._mcnt
                    for i, j in inner:
                        mcnt[i:j] += sign
        tn = self._tn
        if tn:
            qd = self._tail_dim()
            m = np.abs(self._tx[qd, :tn] - xl[qd]) <= self._rq_tail[qd]
            if a is not None:
                m &= self._ta[:tn] == a
            rows = m.nonzero()[0]
            if len(rows):
                n1 = len(cand)
                coords = self._tx.take(rows, axis=1)
                if n1:
                    coords = np.concatenate((self._mx.take(cand, axis=1), coords), 1)
                hit = (self._d2_point(coords, xl) <= self._rho2).nonzero()[0]
                total += len(hit)
                if n1:
                    hm = hit[hit < n1]
                    self._mcnt[cand[hm]] += sign
                    hit = hit[len(hm):] - n1
                self._tcnt[rows[hit]] += sign
                return total
        if len(cand):
            hit = cand[self._d2_point(self._mx.take(cand, axis=1), xl) <= self._rho2]
            total += len(hit)
            self._mcnt[hit] += sign
        return total

    def _insert_one(self, slot: int, x: np.ndarray, xl: list, a: int | None) -> None:
        """``_insert`` for one sample (same semantics, scalar bookkeeping)."""
        T = self._seen
        S1, S2 = self._S1, self._S2
        w = self._where[slot]
        evicted = w > 0
        if evicted:
            p = int(self._pos[slot])
            ae = None
            if w == 1:
                xe = self._mx[:, p].copy()
                if self.num_actions:
                    ae = int(self._mkey[p]) >> self._grid.shift_a
                self._mx[:, p] = np.nan
                self._mslot[p] = -1
                self._dead_add([p])
            else:
                xe = self._tx[:, p].copy()
                if self.num_actions:
                    ae = int(self._ta[p])
                self._tx[:, p] = np.nan
                self._tslot[p] = -1
            self._where[slot] = 0
            xel = xe.tolist()
            self._n -= 1
            for m, (v, c) in enumerate(zip(xel, self._c)):
                d = v - c
                S1[m] -= d
                S2[m] -= d * d
        if self._c is None:
            self._c = list(xl)
        for m, (v, c) in enumerate(zip(xl, self._c)):
            d = v - c
            S1[m] += d
            S2[m] += d * d
        self._n += 1
        self._seen = T + 1
        if T % self.sigma_every == 0:
            self._recompute_sigma(x[None])
        if evicted:
            self._apply_one(xel, xe, ae, -1)
        n = 1 + self._apply_one(xl, x, a, 1)
        tn = self._tn
        if tn == self._tcap:
            self._tgrow(tn + 1)
        self._tx[:, tn] = x
        if a is not None:
            self._ta[tn] = a
        self._tslot[tn] = slot
        self._tcnt[tn] = n
        self._where[slot] = 2
        self._pos[slot] = tn
        self._tn = tn + 1
        if tn + 1 >= self._tail_limit:
            self._merge()
