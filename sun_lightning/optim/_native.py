"""The optimizers' C passes over lists of parameter tensors (``_adamw.c``, built by :mod:`sun_lightning.native`)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from pathlib import Path

import torch

from sun_lightning.native import NativeLibrary, simd_flags

__all__ = ["LIBRARY", "native_tensors", "pointers", "sizes"]

_p, _i64, _f32, _f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_double
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_adamw.c"),
    {
        "sq_norm": ([_i64, _p, _p], _f64),
        "adamw_step": ([_i64, _p, _p, _p, _p, _p, _p, _f64, _f64, _f64, _f32, _f32, _f32, _p, _f32], None),
        "lerp_tensors": ([_i64, _p, _p, _p, _f32], None),
    },
    "ClippedAdamW's CPU step (_adamw.c)",
    # sqrtf inlined (no errno) so that the step's loop vectorizes: ~10x faster than libm calls
    ("-fno-math-errno", "-fno-trapping-math", *simd_flags()),
)


def pointers(tensors: list[torch.Tensor]) -> ctypes.Array:
    """The tensors' data addresses as a C array."""
    return (_p * len(tensors))(*[t.data_ptr() for t in tensors])


def sizes(tensors: list[torch.Tensor]) -> ctypes.Array:
    """The tensors' element counts as a C array."""
    return (_i64 * len(tensors))(*[t.numel() for t in tensors])


def native_tensors(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether the C passes serve these tensors: contiguous float32 dense CPU tensors."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.layout == torch.strided and t.is_contiguous()
               for t in tensors)
