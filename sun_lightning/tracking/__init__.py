"""Experiment tracking: run naming (:mod:`.naming`), the embedded MLflow store (:mod:`.store`) and the Lightning
logger with its durable queue (:mod:`.logger`).

``sun_lightning.tracking.<name>`` still finds every name the flat module of earlier versions had, lazily, so that
importing run naming does not import MLflow.
"""

from __future__ import annotations

import importlib

_PARTS = ("naming", "store")


def __getattr__(name: str):
    if name in ("naming", "store", "logger"):
        return importlib.import_module(f"{__name__}.{name}")
    for part in _PARTS:
        module = importlib.import_module(f"{__name__}.{part}")
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
