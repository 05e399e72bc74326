"""Hyperparameter domains, read from the constructors' signatures.

A constructor argument annotated ``Annotated[float, OPEN_UNIT]`` (or one of the aliases below)
declares its domain where it is defined; :func:`check_arguments` and :func:`check_config` read the
annotations and refuse a value outside it in one line naming the key, the value and the domain (exit 2
from the CLI), before anything is built. There is no list of keys to keep in step with the code:
a new argument with a domain annotation is checked.
"""

from __future__ import annotations

import importlib
import inspect
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from sun_lightning.errors import ConfigError


@dataclass(frozen=True)
class Domain:
    """An interval of numbers: ``low``/``high`` (``None``: unbounded), each end open or closed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            if self.low == 0 and self.low_open or self.low == 1 and not self.low_open:
                return "positive"
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


POSITIVE = Domain(0, low_open=True)
NON_NEGATIVE = Domain(0)
AT_LEAST_ONE = Domain(1)
UNIT = Domain(0, 1)
OPEN_UNIT = Domain(0, 1, low_open=True, high_open=True)
#: (0, 1]: a Polyak rate (1 copies the network).
RATE = Domain(0, 1, low_open=True)
#: [0, 1): a dropout probability.
DROPOUT = Domain(0, 1, high_open=True)

PositiveFloat = Annotated[float, POSITIVE]
NonNegativeFloat = Annotated[float, NON_NEGATIVE]
PositiveInt = Annotated[int, AT_LEAST_ONE]
NonNegativeInt = Annotated[int, NON_NEGATIVE]
Fraction = Annotated[float, UNIT]
OpenFraction = Annotated[float, OPEN_UNIT]
Rate = Annotated[float, RATE]
Dropout = Annotated[float, DROPOUT]


def domain_of(annotation: Any) -> Domain | None:
    """The :class:`Domain` in an annotation (``Annotated[...]``, possibly inside ``Optional``), else ``None``."""
    if typing.get_origin(annotation) is Annotated:
        return next((meta for meta in annotation.__metadata__ if isinstance(meta, Domain)), None)
    for arg in typing.get_args(annotation):  # X | None
        if (found := domain_of(arg)) is not None:
            return found
    return None


def domains(cls_or_function: type | Callable) -> dict[str, Domain]:
    """Every constructor argument's domain, by name (a class's whole MRO: ``**kwargs`` forward to a base)."""
    functions = ([klass.__dict__["__init__"] for klass in reversed(cls_or_function.__mro__) if "__init__" in klass.__dict__]
                 if isinstance(cls_or_function, type) else [cls_or_function])
    found: dict[str, Domain] = {}
    for function in functions:
        try:
            hints = typing.get_type_hints(function, include_extras=True)
        except Exception:  # an annotation that does not resolve outside its module: no domains there
            continue
        for name, hint in hints.items():
            if (domain := domain_of(hint)) is not None:
                found[name] = domain
    return found


def check_arguments(cls_or_function: type | Callable, values: Mapping[str, Any], prefix: str = "") -> None:
    """Raise :class:`~sun_lightning.errors.ConfigError` for the first value outside its annotated domain.

    Args:
        cls_or_function: the class (or ``__init__``) whose annotations declare the domains.
        values: argument values by name (``None`` means unset and passes).
        prefix: the config path of the arguments (``model.init_args.``), for the message.
    """
    known = domains(cls_or_function)
    for name, value in values.items():
        domain = known.get(name)
        if domain is not None and value is not None and value not in domain:
            raise ConfigError(f"{prefix}{name} must be {domain}, got {value!r}")


def _resolve(class_path: str) -> type | None:
    module, _, name = str(class_path).rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return found if inspect.isclass(found) else None


def check_config(config: Any, groups: Mapping[str, type | None]) -> None:
    """Check a parsed config's groups against their classes' domains (nested ``class_path`` objects too).

    Args:
        config: the ``fit`` subcommand's namespace.
        groups: group name → the class its keys are arguments of (``None``: read ``class_path``).
    """
    for group, cls in groups.items():
        section = config.get(group)
        if section is not None:
            _check_section(section, cls, f"{group}.")


def _check_section(section: Any, cls: type | None, prefix: str) -> None:
    if cls is None and hasattr(section, "get") and section.get("class_path"):
        cls, section, prefix = _resolve(section.class_path), section.get("init_args"), f"{prefix}init_args."
    if cls is None or section is None:
        return
    values = dict(vars(section))  # jsonargparse's Namespace: nested objects are Namespaces
    check_arguments(cls, {k: v for k, v in values.items() if not hasattr(v, "get")}, prefix)
    for name, value in values.items():
        if hasattr(value, "get") and value.get("class_path"):
            _check_section(value, None, f"{prefix}{name}.")
