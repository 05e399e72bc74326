"""Python side of the native hash-grid index of the radius pseudocount (SPEC §4).

:class:`GridIndex` owns the C handle (``_pseudocount.c``), the reusable buffers of its calls and
the grid geometry policy: which features are gridded, the cell sides, and when the grid is
rebuilt.  The exact neighbour semantics are in the module docstring of ``pseudocount.py``.
"""

from __future__ import annotations

import weakref

import numpy as np

from sun_lightning.replay.pseudocount_native import load_library

__all__ = ["GridIndex"]

# cell side / (rho st) at build time, by number of grid features: finer cells in low dimension
# (where whole cells fit inside the ball and are counted without distance checks), coarser ones
# in 3-4 dimensions (where a cell lookup costs more than the extra candidates it saves)
_CELL = {1: 0.3125, 2: 0.625, 3: 1.25, 4: 2.0}
_GROW_MAX = 1.2  # rebuild once rho st grows 20% ...
_SHRINK_MIN = 1 / 1.5  # ... or shrinks by a third (queries stay exact in between)
_RHO_MIN = 1e-6  # cells stay a sensible size for rho = 0 (exact duplicates) too
# entries per non-empty cell above which the grid is refined (halved sides) ...: with 1-2 grid
# features whole cells inside the ball are cheap, with 3-4 every candidate costs a check
_DENSE = {1: 128, 2: 128, 3: 48, 4: 48}
_LEVEL_MIN = -2  # ... down to cell sides of _CELL / 4
_ERRORS = {-1: (ValueError, "goal features must be finite"),
           -2: (MemoryError, "native pseudocount index: out of memory"),
           -3: (IndexError, "index out of range [0, capacity)")}


def check(rc: int) -> int:
    """Raise for a negative return code of the native index, else return it."""
    if rc < 0:
        exc, msg = _ERRORS.get(rc, (RuntimeError, f"native pseudocount index: error {rc}"))
        raise exc(msg)
    return rc


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class GridIndex:
    """Native index: entries, counts, neighbour updates and the grid geometry.

    Args:
        goal_dim: M.
        num_actions: discrete goal actions (0: none).
        capacity: storage positions.
        rho: radius (standardized units).
        st: float64 [M] scale array, read by C at every query; updated in place by the owner.
        mom: float64 [3 M] moments block (``RunningMoments.mom``), updated by single steps.
    """

    def __init__(self, goal_dim: int, num_actions: int, capacity: int, rho: float,
                 st: np.ndarray, mom: np.ndarray):
        if capacity >= 2 ** 31:
            raise ValueError("capacity must be < 2**31 (int32 positions in the native index)")
        self.lib = lib = load_library()
        self.M = goal_dim
        self.num_actions = num_actions
        self.rho = rho
        self._keep = (st, mom)  # C holds raw pointers into these arrays
        h = lib.pc_new(goal_dim, capacity, rho, rho * rho, _ptr(st), _ptr(mom))
        if not h:
            raise MemoryError("native pseudocount index: out of memory")
        self.h = h
        self._finalizer = weakref.finalize(self, lib.pc_free, h)
        self.step = lib.pc_step  # hot path: called directly by the owner
        self.dims = np.zeros(0, np.int32)  # grid features ...
        self.st_build: np.ndarray | None = None  # ... and their st at the last rebuild
        self._xe = np.empty((64, goal_dim))
        self._ae = np.zeros(64, np.int64)
        self._stats = np.zeros(6, np.int64)

    # ------------------------------------------------------------------ geometry
    def ensure_grid(self, st: np.ndarray, sigma: np.ndarray, mean: np.ndarray) -> None:
        """Rebuild unless the grid still suits ``rho st`` (the grid is exact for any st).

        Also halves the cell sides once the data has become dense (more than ``_DENSE[D]``
        entries per non-empty cell on average), down to ``2**_LEVEL_MIN`` times the default; sparse
        grids are coarsened by the C side (``maybe_coarsen``).
        """
        if self.st_build is not None:
            ratio = st[self.dims] / self.st_build
            if ratio.max() <= _GROW_MAX and ratio.min() >= _SHRINK_MIN:
                s = self.stats()
                dense = s["live"] > _DENSE[len(self.dims)] * s["nonempty"]
                if dense and s["level"] > _LEVEL_MIN:
                    self.rebuild(st, sigma, mean, s["level"] - 1)
                return
        self.rebuild(st, sigma, mean)

    def rebuild(self, st: np.ndarray, sigma: np.ndarray, mean: np.ndarray,
                level: int | None = None) -> None:
        """O(N) re-bucketing for the current st: the features with the largest sigma / st are
        gridded (all of them when M <= 4), cells centred on the mean, sides
        ``_CELL[D] rho st 2**level`` (the coarsening level is kept unless given)."""
        if level is None:
            level = self.stats()["level"]
        D = min(self.M, 4)
        dims = np.sort(np.argsort(-(sigma / st), kind="stable")[:D]).astype(np.int32)
        o = np.where(np.isfinite(mean[dims]), mean[dims], 0.0)
        L = np.clip(_CELL[D] * max(self.rho, _RHO_MIN) * st[dims] * 2.0 ** level, 1e-300, 1e300)
        self.set_geometry(dims, o, L, level)
        self.dims = dims
        self.st_build = st[dims].copy()

    def set_geometry(self, dims: np.ndarray, o: np.ndarray, L: np.ndarray, level: int) -> None:
        dims = np.ascontiguousarray(dims, np.int32)
        o = np.ascontiguousarray(o, np.float64)
        L = np.ascontiguousarray(L, np.float64)
        check(self.lib.pc_set_grid(self.h, len(dims), _ptr(dims), _ptr(o), _ptr(L), level))

    @property
    def geometry(self) -> tuple | None:
        """(grid features, origin, cell sides, level) as held by C; None before the first build."""
        if self.st_build is None:
            return None
        dims = np.zeros(4, np.int32)
        o = np.zeros(4)
        L = np.zeros(4)
        D = self.lib.pc_geometry(self.h, _ptr(dims), _ptr(o), _ptr(L))
        return dims[:D], o[:D], L[:D], self.stats()["level"]

    def get_state(self) -> dict:
        """Picklable state: geometry, rebuild reference and every entry."""
        return {"geometry": self.geometry, "dims": self.dims, "st_build": self.st_build,
                "entries": self.export()}

    def set_state(self, state: dict) -> None:
        """Restore :meth:`get_state` into this (empty) index."""
        if state["geometry"] is not None:
            self.set_geometry(*state["geometry"])
        self.dims, self.st_build = state["dims"], state["st_build"]
        self.load(*state["entries"])

    # ------------------------------------------------------------------ batch operations
    def evict(self, idx: np.ndarray):
        """Remove the entries at positions ``idx`` (distinct); return (coords [ne, M], actions)."""
        B = len(idx)
        if len(self._xe) < B:
            self._xe = np.empty((B, self.M))
            self._ae = np.zeros(B, np.int64)
        ne = check(self.lib.pc_evict(self.h, B, _ptr(idx), _ptr(self._xe), _ptr(self._ae)))
        return self._xe[:ne], self._ae[:ne]

    def apply(self, x: np.ndarray, a: np.ndarray | None, sign: int) -> None:
        """Add ``sign`` to the counts of the stored neighbours of each row of ``x``."""
        check(self.lib.pc_apply(self.h, len(x), _ptr(x), None if a is None else _ptr(a), sign))

    def insert(self, idx: np.ndarray, x: np.ndarray, a: np.ndarray | None) -> None:
        """Insert rows of ``x`` one after another at (empty) positions ``idx``."""
        check(self.lib.pc_insert(self.h, len(idx), _ptr(idx), _ptr(x),
                                 None if a is None else _ptr(a)))

    def counts(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty(len(idx), np.int64)
        check(self.lib.pc_counts(self.h, len(idx), _ptr(idx), _ptr(out)))
        return out

    def tune(self, gc_cells: int = 4096, box_all: int = 8192) -> None:
        """Cell slack of compaction / coarsening and the largest enumerated query box (tests)."""
        self.lib.pc_tune(self.h, gc_cells, box_all)

    # ------------------------------------------------------------------ state
    def stats(self) -> dict:
        self.lib.pc_stats(self.h, _ptr(self._stats))
        keys = ("live", "cells", "nonempty", "bytes", "rebuilds", "level")
        return dict(zip(keys, self._stats.tolist()))

    def nbytes(self) -> int:
        return self.stats()["bytes"] + self._xe.nbytes + self._ae.nbytes

    def export(self):
        """Every stored entry in position order: (positions, coords [n, M], actions, counts)."""
        n = self.stats()["live"]
        slots = np.empty(n, np.int64)
        x = np.empty((n, self.M))
        a = np.empty(n, np.int64)
        cnt = np.empty(n, np.int64)
        got = self.lib.pc_export(self.h, _ptr(slots), _ptr(x), _ptr(a), _ptr(cnt))
        assert got == n
        return slots, x, a, cnt

    def load(self, slots, x, a, cnt) -> None:
        """Store exported entries with their counts (the geometry must be set first)."""
        slots = np.ascontiguousarray(slots, np.int64)
        x = np.ascontiguousarray(x, np.float64).reshape(len(slots), self.M)
        a = np.ascontiguousarray(a, np.int64)
        cnt = np.ascontiguousarray(cnt, np.int64)
        check(self.lib.pc_load(self.h, len(slots), _ptr(slots), _ptr(x), _ptr(a), _ptr(cnt)))
