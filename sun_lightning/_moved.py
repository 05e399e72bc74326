"""The modules' earlier names, which configs, checkpoints and saved ``config.yaml`` files name, kept importable.

Each old dotted name imports the module that now holds its code (the same module object, so class paths, pickles
and ``isinstance`` agree). Installed by ``sun_lightning/__init__.py``, which the top-level ``callbacks`` package imports.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old dotted name → new dotted name
MOVED = {
    "sun_lightning.data": "sun_lightning.exploration.datamodule",
    "sun_lightning.distributed": "sun_lightning.exploration.distributed",
    "sun_lightning.resume": "sun_lightning.exploration.state",
    "sun_lightning.integrity": "sun_lightning.checkpoints.integrity",
    "sun_lightning.identity": "sun_lightning.checkpoints.identity",
    "sun_lightning.safe_pickle": "sun_lightning.checkpoints.safe_pickle",
    "sun_lightning.run_folders": "sun_lightning.checkpoints.run_folders",
    "sun_lightning.mlflow_logger": "sun_lightning.tracking.logger",
    "sun_lightning.cli": "sun_lightning.run.cli",
    "sun_lightning.precheck": "sun_lightning.run.precheck",
    "sun_lightning.runtime": "sun_lightning.run.runtime",
    "sun_lightning.precision": "sun_lightning.learners.precision",
    "sun_lightning.evaluation": "sun_lightning.metrics.evaluation",
    "callbacks.*": "sun_lightning.callbacks.*",  # the top-level package ``callbacks`` of earlier versions
}


def new_name(name: str, moved: dict[str, str] = MOVED) -> str | None:
    """Where the module ``name`` lives now, or ``None`` where it did not move."""
    if name in moved:
        return moved[name]
    for old, new in moved.items():
        if old.endswith(".*") and name.startswith(old[:-1]):
            return new[:-1] + name[len(old) - 1:]
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old names of :data:`MOVED` (and of a moved package's modules, by prefix) to the new modules."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def target(self, name: str) -> str | None:
        return new_name(name, self.moved)

    def find_spec(self, name, path=None, target=None):
        new = self.target(name)
        return None if new is None else importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return importlib.import_module(self.target(spec.name))

    def exec_module(self, module) -> None:
        pass  # the module ran under its new name


def install(moved: dict[str, str]) -> None:
    if not any(isinstance(finder, MovedModules) and finder.moved is moved for finder in sys.meta_path):
        sys.meta_path.append(MovedModules(moved))
