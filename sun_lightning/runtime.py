"""Process-level settings that the training loop's speed depends on."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_allocator() -> bool:
    """Keep freed memory in the process instead of returning it to the OS.

    Every update allocates and frees the same few MB of activations. With
    glibc's defaults the freed top of the heap is trimmed (and large blocks
    are mmapped) each time, so every update page-faults its buffers back in. Returns
    whether the settings were applied (glibc only).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
        ok &= libc.mallopt(_M_TOP_PAD, 256 * 2**20)
        return bool(ok)
    except (OSError, AttributeError):
        return False
