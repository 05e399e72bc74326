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


#: Notices a dependency prints to stderr when imported (through ``farama_notifications``), by package, with a text
#: that marks the ones saying nothing about a run of this package: Gymnasium-Robotics 1.2.1–1.4.2 prints that the
#: ``AdroitHand*Dense-v1`` rewards changed, on every import, whatever env the run uses.
_UNRELATED_NOTICES = {"gymnasium_robotics": "AdroitHand"}


def drop_unrelated_notices(keep_if: str = "") -> int:
    """Remove the :data:`_UNRELATED_NOTICES` from ``farama_notifications`` before their package is imported (unless
    ``keep_if``, the command line and config text, names what they are about); returns how many were removed."""
    try:
        from farama_notifications import notifications
    except ImportError:
        return 0
    removed = 0
    for package, about in _UNRELATED_NOTICES.items():
        notices = notifications.get(package)
        if not isinstance(notices, dict) or about in keep_if:
            continue
        for version in [v for v, text in notices.items() if about in str(text)]:
            del notices[version]
            removed += 1
    return removed


def quiet_third_party(keep_if: str = "") -> None:
    """Silence the INFO notices of :data:`_CHATTY_LOGGERS`, one deprecation warning Lightning raises itself and the
    import notices of :data:`_UNRELATED_NOTICES` (the CLI's; importing the package changes none of them)."""
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    drop_unrelated_notices(keep_if)
    # Lightning 2.6's own pytree helper calls an API that torch 2.13 deprecates; nothing in this project can fix it.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
