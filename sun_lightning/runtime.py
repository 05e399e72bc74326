"""Process-level settings that the training loop's speed depends on."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import warnings

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


#: Third-party loggers whose INFO lines precede every run: Lightning's rank-zero notices (accelerators
#: found, "Seed set to", cloud-logging tips, "`Trainer.fit` stopped") and MLflow's schema migrations on a
#: fresh store. Their warnings still show; the run prints its own summary at the end.
_CHATTY_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                   "lightning.fabric.utilities.seed", "lightning.pytorch.utilities.seed",
                   "mlflow.store.db.utils", "alembic.runtime.migration")


def quiet_third_party() -> None:
    """Silence the INFO notices of :data:`_CHATTY_LOGGERS` and one deprecation warning Lightning raises itself."""
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Lightning 2.6's own pytree helper calls an API that torch 2.13 deprecates; nothing in this project can fix it.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
