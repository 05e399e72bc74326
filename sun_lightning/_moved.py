"""Earlier import paths, which configs, checkpoints and saved ``config.yaml`` files name, kept importable: the one
place that knows them.

Two kinds of move, one table each, resolved by one import hook (:class:`MovedModules`, installed first on
``sys.meta_path`` by ``sun_lightning/__init__.py``, which the top-level ``callbacks`` package imports):

* a module that moved (:data:`MOVED`): its old dotted name imports the module that now holds its code, the same
  module object, so class paths, pickles and ``isinstance`` agree;
* a name that left a module which kept its path (:data:`MOVED_NAMES`): the module, when imported, gets a module
  ``__getattr__`` (PEP 562) that imports the name's new module on first use, so that a name moved out of a light
  module costs nothing until asked for (``sun_lightning.tracking`` stays free of MLflow).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

#: old dotted module name → new dotted module name (``.*``: every module of a package, by prefix)
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

#: The flat ``sun_lightning/tracking.py`` of earlier versions, now the package's ``naming`` and ``store``.
_NAMING = ("env_name", "method_of", "run_name", "run_tags", "hardware", "git_commit")
_STORE = ("MLFLOW_DIR", "MLFLOW_URI", "local_store_uri", "PARENT_TAG", "KIND_TAG", "LOCAL_STORE_OPTION",
          "SERVER_TIMEOUT_S", "HTTP_RETRY_ENV", "is_server", "limit_http_retries", "quiet_store_logs", "absolute_uri",
          "first_line", "store_error", "check_server", "SQLITE_BUSY_TIMEOUT_S", "check_sqlite", "create_sqlite_store",
          "prepare_store", "config_params", "comparison_parent")

#: module (as it is named now) → {a name it had → the module that holds the name now}
MOVED_NAMES: dict[str, dict[str, str]] = {
    # ``sun_lightning.resume`` (now ``exploration.state``) held the RNG snapshot
    "sun_lightning.exploration.state": dict.fromkeys(("rng_state", "set_rng_state"), "sun_lightning.checkpoints.rng"),
    "sun_lightning.tracking": {**dict.fromkeys(_NAMING, "sun_lightning.tracking.naming"),
                               **dict.fromkeys(_STORE, "sun_lightning.tracking.store")},
}


def new_name(name: str, moved: dict[str, str] = MOVED) -> str | None:
    """Where the module ``name`` lives now, or ``None`` where it did not move."""
    if name in moved:
        return moved[name]
    for old, new in moved.items():
        if old.endswith(".*") and name.startswith(old[:-1]):
            return new[:-1] + name[len(old) - 1:]
    return None


def names_getattr(module: str, names: dict[str, str]):
    """A module ``__getattr__`` of ``module`` that finds each of ``names`` in the module that holds it now."""
    def __getattr__(name: str):
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


class _WithMovedNames(importlib.abc.Loader):
    """The module's own loader, then its moved names attached; anything else asked of it goes to that loader."""

    def __init__(self, loader, names: dict[str, str]) -> None:
        self.loader, self.names = loader, names

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        if "__getattr__" not in vars(module):
            module.__getattr__ = names_getattr(module.__name__, self.names)

    def __getattr__(self, name: str):  # get_code, get_source, get_resource_reader, is_package, ...
        return getattr(self.loader, name)


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old module names of ``moved`` (and of a moved package's modules, by prefix) to the new modules,
    and gives the modules of ``names`` their moved names."""

    def __init__(self, moved: dict[str, str], names: dict[str, dict[str, str]] | None = None) -> None:
        self.moved, self.names = moved, names or {}

    def target(self, name: str) -> str | None:
        return new_name(name, self.moved)

    def find_spec(self, name, path=None, target=None):
        if self.target(name) is not None:
            return importlib.util.spec_from_loader(name, self)
        if name in self.names:
            return self._with_names(name, path, target)
        return None

    def _with_names(self, name, path, target):
        """The spec the other finders give ``name``, its loader wrapped to attach the moved names."""
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _WithMovedNames(spec.loader, self.names[name])
                return spec
        return None

    def create_module(self, spec):
        return importlib.import_module(self.target(spec.name))

    def exec_module(self, module) -> None:
        pass  # the module ran under its new name


def install(moved: dict[str, str], names: dict[str, dict[str, str]] | None = None) -> None:
    """Put the resolver first on ``sys.meta_path`` (once per table): before the path is searched, so that a moved
    name's module gets its names however it is imported."""
    if not any(isinstance(finder, MovedModules) and finder.moved is moved for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules(moved, names))
