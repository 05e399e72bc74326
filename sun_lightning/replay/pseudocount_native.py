"""The native index of the radius pseudocount (SPEC §4): ``_pseudocount.c``, built and loaded by
:mod:`sun_lightning.native` (``-ffp-contract=off`` there keeps the distance arithmetic free of
fused multiply-adds: ties at exactly ``rho`` must round like numpy)."""

from __future__ import annotations

import ctypes
from pathlib import Path

from sun_lightning.native import NativeError, NativeLibrary

__all__ = ["LIBRARY", "load_library", "NativeError"]

_p, _i64, _i32, _f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_pseudocount.c"),
    {
        "pc_new": ([_i32, _i64, _f64, _f64, _p, _p], _p),
        "pc_free": ([_p], None),
        "pc_set_grid": ([_p, _i32, _p, _p, _p, _i32], _i32),
        "pc_geometry": ([_p, _p, _p, _p], _i32),
        "pc_evict": ([_p, _i64, _p, _p, _p], _i64),
        "pc_apply": ([_p, _i64, _p, _p, _i32], _i32),
        "pc_insert": ([_p, _i64, _p, _p, _p], _i32),
        "pc_step": ([_p, _i64, _p, _i32, _i64], _i32),
        "pc_counts": ([_p, _i64, _p, _p], _i32),
        "pc_export": ([_p, _p, _p, _p, _p], _i64),
        "pc_load": ([_p, _i64, _p, _p, _p, _p], _i32),
        "pc_stats": ([_p, _p], None),
        "pc_tune": ([_p, _i64, _i64], None),
    },
    "RadiusPseudocount's native index (_pseudocount.c)",
)


def load_library() -> ctypes.CDLL:
    """The compiled native index (built on first use, then cached per process and on disk).

    Raises:
        NativeError: no C compiler, a compile error, or no writable cache directory.
    """
    return LIBRARY.load()
