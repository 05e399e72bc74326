"""Config and command-line errors found in a second, before the heavy imports (Lightning, torch, MuJoCo).

The live parser (LightningCLI and jsonargparse) needs about 20 s of imports before it can say that a key is
misspelt. This module reads the same constructor signatures from the source files with :mod:`ast`, without
importing them, merges the config files and overrides the way the parser does, and raises the error the live
parser would raise, with the same one line (:mod:`sun_lightning.errors`): an unknown subcommand, a missing or
malformed config file, an unknown key of ``data``, ``model.init_args``, ``trainer`` and the callback groups, a
word where a number belongs, a value outside its annotated domain (:mod:`sun_lightning.domains`), a run
too short to learn, a learner of the other family than the env's actions, and the environment's part
(:mod:`sun_lightning.run.precheck_env`: ``data.goal``, the id against gymnasium's registry, ``data.layout``, goal dims
against the observation). Anything it cannot judge for certain (a class it cannot read, a nested object, a union
type) it leaves to the live parser, which still checks everything: this is a fast path, never a second set of
rules. ``tests/unit/run/test_precheck.py`` holds both to the same lines.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from sun_lightning import domains
from sun_lightning._moved import new_name
from sun_lightning.callbacks.groups import CALLBACK_GROUPS
from sun_lightning.errors import HELP_HINT, ConfigError, UsageError, cannot_act, check_config_files, suggest, unknown_key
from sun_lightning.run import precheck_env

SUBCOMMANDS = ("fit", "validate", "test", "predict")
#: Config group → the class its keys are constructor arguments of (as ``cli.SUNCLI`` adds them).
GROUPS = {"trainer": "lightning.pytorch.trainer.trainer.Trainer",
          "data": "sun_lightning.exploration.config.DataConfig",
          **{group: path for group, (path, _) in CALLBACK_GROUPS.items()}}
#: The order in which the CLI checks the groups' domains (``SUNCLI.before_instantiate_classes``).
DOMAIN_ORDER = ("model", "data", *CALLBACK_GROUPS)
#: The learner families' root classes and the actions each takes (discrete: True), as
#: :func:`sun_lightning.learners.family.check_family` tells them apart.
FAMILY_ROOTS = {("sun_lightning.learners.dqn", "DQNSVF"): True, ("sun_lightning.learners.td3", "TD3SVF"): False}
_MISSING = object()
_NUMBER = {"int": int, "float": float}


class Param:
    """One constructor argument read from source: its annotation's text and default (``_MISSING``: none or not
    a literal)."""

    def __init__(self, annotation: str, default) -> None:
        self.annotation, self.default = annotation, default


def _module_file(module: str) -> Path | None:
    """The source file of ``module`` without importing it (nor its packages); an earlier name's new home."""
    module = new_name(module) or module
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *rest)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _parse(module: str) -> ast.Module | None:
    path = _module_file(module)
    return ast.parse(path.read_text(), str(path)) if path else None


def _find_class(module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
    """The class ``name`` of ``module``, following ``from x import name`` re-exports."""
    tree = _parse(module) if depth < 6 else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            real = next(a.name for a in node.names if (a.asname or a.name) == name)
            return _find_class(_absolute(module, node), real, depth + 1)
    return None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = _module_file(module) is not None and _module_file(module).name == "__init__.py"
    parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(parts + ([node.module] if node.module else []))


def signature(class_path: str, depth: int = 0) -> dict[str, Param] | None:
    """The constructor arguments of ``class_path`` (a base's too where ``**kwargs`` forwards to it; a dataclass's
    fields), read from source; ``None`` where some of them cannot be known without importing."""
    module, _, name = class_path.rpartition(".")
    found = _find_class(module, name) if depth < 6 else None
    if found is None:
        return None
    module, node = found
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    bases = [_base_path(module, base) for base in node.bases]
    if init is None and _is_dataclass(node):
        return _fields(node, bases, depth)
    if init is None:
        return signature(bases[0], depth + 1) if bases and bases[0] else ({} if not node.bases else None)
    args = init.args
    positional = args.posonlyargs + args.args
    defaults = [_MISSING] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = {}
    for arg, default in [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
        if arg.arg != "self":
            params[arg.arg] = Param(ast.unparse(arg.annotation) if arg.annotation else "", _literal(default))
    if args.vararg is not None:
        return None
    if args.kwarg is not None:
        base = signature(bases[0], depth + 1) if bases and bases[0] else None
        if base is None:
            return None
        params = {**base, **params}
    return params


def _is_dataclass(node: ast.ClassDef) -> bool:
    """``@dataclass`` or ``@dataclass(...)`` (not ``init=False``: then its ``__init__`` is someone else's)."""
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if (target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)) == "dataclass":
            return not any(k.arg == "init" and _literal(k.value) is False for k in (call.keywords if call else ()))
    return False


def _fields(node: ast.ClassDef, bases: list[str | None], depth: int) -> dict[str, Param] | None:
    """A dataclass's constructor: its bases' fields, then its own annotated ones (``ClassVar`` ones are not fields)."""
    params: dict[str, Param] = {}
    for base in bases:
        found = _find_class(*base.rsplit(".", 1)) if base else None
        if found is None or not _is_dataclass(found[1]):
            return None  # a base that is no dataclass we can read: its part of the constructor is unknown
        inherited = signature(base, depth + 1)
        if inherited is None:
            return None
        params.update(inherited)
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            annotation = ast.unparse(item.annotation)
            if "ClassVar" in annotation:
                continue
            if "InitVar" in annotation or "KW_ONLY" in annotation:
                return None  # init-only and keyword-only markers: not worth reading
            params[item.target.id] = Param(annotation, _literal(item.value))
    return params


def _base_path(module: str, base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return f"{module}.{base.id}"
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        return None  # ``pl.Callback``: a module alias, not worth resolving (such bases take no arguments we check)
    return None


def _literal(node):
    if node is None or node is _MISSING:
        return _MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return _MISSING


# ---- the merged config ------------------------------------------------------------------------------
def _overrides(tokens: list[str]) -> Iterator[tuple[str, str | None]]:
    """``(key, value)`` pairs of ``--key value`` / ``--key=value`` tokens (``value`` None: a bare flag)."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            yield "", token
            i += 1
            continue
        if "=" in token:
            key, value = token[2:].split("=", 1)
            yield key, value
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            yield token[2:], tokens[i + 1]
            i += 2
        else:
            yield token[2:], None
            i += 1


def _flat(mapping: dict, prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in mapping.items():
        if isinstance(value, dict) and not {"class_path", "init_args"} & set(value) and prefix.count(".") < 1:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class _Known:
    """The keys the live parser accepts, as far as the sources tell."""

    def __init__(self) -> None:
        self.groups = {group: signature(path) for group, path in GROUPS.items()}
        self.models: dict[str, dict[str, Param] | None] = {}

    def model(self, class_path: str | None) -> dict[str, Param] | None:
        if not class_path:
            return None
        if class_path not in self.models:
            self.models[class_path] = signature(class_path)
        return self.models[class_path]

    def options(self) -> list[str]:
        return [f"--{group}.{name}" for group, params in self.groups.items() if params for name in params]


def check(argv: list[str]) -> None:
    """Raise the error the live parser would raise for ``argv``, where it can be told from the sources alone."""
    if not argv or any(token in ("-h", "--help") or token.startswith("--print_config") for token in argv):
        return
    command = argv[0]
    if command.startswith("-"):
        return
    if command not in SUBCOMMANDS:
        raise UsageError(f"argument subcommand: invalid choice: '{command}' (choose from "
                         f"{', '.join(repr(s) for s in SUBCOMMANDS)})")
    check_config_files(argv[1:])
    known, values, model_path = _Known(), {}, None
    for key, raw in _overrides(argv[1:]):
        if key == "config":
            if raw is None or not Path(raw).is_file():
                if raw is not None:
                    raise UsageError(f'Parser key "config":\n  File does not exist: \'{os.path.abspath(raw)}\'')
                return
            loaded = yaml.safe_load(Path(raw).read_text()) or {}
            if not isinstance(loaded, dict):
                return
            for flat_key, value in _flat(loaded):
                model_path = _accept(known, flat_key, value, values, model_path, from_file=True)
        elif not key or raw is None:
            return  # a positional token or a bare flag: the live parser's business
        elif key.endswith("+"):
            continue  # ``--trainer.callbacks+=X`` appends to a list: the live parser's business
        else:
            value = yaml.safe_load(raw) if raw.strip() else raw
            model_path = _accept(known, key, value, values, model_path, from_file=False, raw=raw)
    _check_domains(known, values, model_path)
    _check_budget(known, values)
    _check_goal(values)
    precheck_env.check_env_id(values)
    precheck_env.check_layout(values)
    precheck_env.check_spaces(values)
    _check_family(model_path, values)


def _accept(known: _Known, key: str, value, values: dict, model_path, from_file: bool, raw: str | None = None):
    group, _, name = key.partition(".")
    if group == "model":
        if name in ("", "class_path"):
            path = value.get("class_path") if isinstance(value, dict) else value
            if isinstance(value, dict):
                for arg, v in (value.get("init_args") or {}).items():
                    _accept(known, f"model.init_args.{arg}", v, values, path, from_file, None)
            return path if isinstance(path, str) else None
        if name.startswith("init_args.") and name.count(".") == 1:
            params = known.model(model_path)
            arg = name.split(".", 1)[1]
            if params is not None and arg not in params:
                raise _unknown_key(key, [f"model.init_args.{p}" for p in params])
            if params is not None:
                _check_type(key, params[arg], value, raw)
                values[key] = value
        return model_path
    params = known.groups.get(group)
    if group == "data" and name.startswith("goal."):  # ``--data.goal.reach 0.5``: one key of the goal space
        goal = values.get("data.goal")
        values["data.goal"] = {**(goal if isinstance(goal, dict) else {}), name.removeprefix("goal."): value}
        return model_path
    if params is None or not name or "." in name:
        return model_path
    if name not in params:
        if from_file:
            raise _unknown_key(key, [option.removeprefix("--") for option in known.options()])
        close = suggest(f"--{key}", known.options())
        hint = f"--{key} (did you mean {close}?)" if close else f"--{key}"
        raise UsageError(key, line=f"unknown option {hint} ({HELP_HINT})")
    _check_type(key, params[name], value, raw)
    values[key] = value
    return model_path


def _check_goal(values: dict) -> None:
    """``data.goal``'s keys as the user wrote them (``data.goal.reachh``), then their types and domains."""
    goal = values.get("data.goal")
    if not isinstance(goal, dict):
        return
    keys = precheck_env.goal_keys(_find_class)
    if keys is None:
        return
    unknown = next((key for key in goal if key not in keys), None)
    if unknown is not None:
        raise _unknown_key(f"data.goal.{unknown}", [f"data.goal.{key}" for key in keys])
    precheck_env.check_goal(goal)


def _unknown_key(key: str, options: list[str]) -> UsageError:
    return UsageError(key, line=unknown_key(key, options))


def _check_type(key: str, param: Param, value, raw: str | None) -> None:
    """A word where the annotation asks for a plain number (``int`` or ``float`` without ``| None``)."""
    expected = _number_type(param.annotation)
    if expected is None or not isinstance(value, str):
        return
    try:
        _NUMBER[expected](value)
    except ValueError:
        raise ConfigError(f"{key}: expected {expected}, got {(raw if raw is not None else value)!r} ({HELP_HINT})") from None


def _number_type(annotation: str) -> str | None:
    """``int`` or ``float`` for a plain number annotation (no union: jsonargparse words those otherwise)."""
    if "|" in annotation or "Optional" in annotation or "Union" in annotation:
        return None
    return _base_type(annotation)


def _base_type(annotation: str) -> str | None:
    """``int`` or ``float``: the number type of an annotation, ``| None`` aside."""
    annotation = annotation.split("|")[0].strip().removeprefix("Optional[").removesuffix("]")
    if annotation in ("int", "float"):
        return annotation
    alias = getattr(domains, annotation, None)
    if alias is not None and getattr(alias, "__origin__", None) in (int, float):
        return alias.__origin__.__name__
    if annotation.startswith("Annotated[") and annotation[10:].split(",")[0].strip() in ("int", "float"):
        return annotation[10:].split(",")[0].strip()
    return None


def _domain(annotation: str) -> domains.Domain | None:
    for part in annotation.replace("Optional[", "").replace("]", "").split("|"):
        part = part.strip()
        alias = getattr(domains, part, None)
        if alias is not None and getattr(alias, "__metadata__", None):
            return domains.domain_of(alias)
        if part.startswith("Annotated["):
            found = getattr(domains, part.rsplit(",", 1)[-1].strip(), None)
            if isinstance(found, domains.Domain):
                return found
    return None


def _check_domains(known: _Known, values: dict, model_path: str | None) -> None:
    sections = {"model": (known.model(model_path), "model.init_args.")}
    sections.update({group: (known.groups.get(group), f"{group}.") for group in DOMAIN_ORDER if group != "model"})
    for group in DOMAIN_ORDER:
        params, prefix = sections[group]
        for name, param in (params or {}).items():
            value = values.get(prefix + name, _MISSING)
            domain = _domain(param.annotation)
            if value is _MISSING or value is None or domain is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or value in domain:
                continue
            if _base_type(param.annotation) == "float":
                value = float(value)  # the parser casts an int given for a float argument
            raise ConfigError(f"{prefix}{name} must be {domain}, got {value!r}")


def _family(class_path: str, depth: int = 0) -> bool | None:
    """Whether the learner ``class_path`` acts in discrete actions (a subclass of the DQN root), in a Box (of the TD3
    root), or ``None`` where its classes cannot be read."""
    module, _, name = class_path.rpartition(".")
    found = _find_class(module, name) if module and depth < 6 else None
    if found is None:
        return None
    module, node = found
    if (module, node.name) in FAMILY_ROOTS:
        return FAMILY_ROOTS[module, node.name]
    for base in node.bases:
        path = _base_path(module, base)
        family = _family(path, depth + 1) if path else None
        if family is not None:
            return family
    return None


def _check_family(model_path: str | None, values: dict) -> None:
    """The live check of :mod:`sun_lightning.learners.family`: a learner of the other family than the env's actions."""
    if not isinstance(model_path, str):
        return
    family = _family(model_path)
    actions = precheck_env.actions_of(values) if family is not None else None
    if actions is not None and family != actions[0]:
        raise ConfigError(cannot_act(model_path.rpartition(".")[2], values["data.env_id"], *actions))


def _check_budget(known: _Known, values: dict) -> None:
    """``DataConfig``'s check that a learning run outlasts its warm-up, for the rules known to learn."""
    params = known.groups.get("data")
    if params is None or "data.selector" in values:
        return  # another rule: whether it learns is in its class, read by the live parser

    def get(name):
        value = values.get(f"data.{name}", params[name].default if name in params else _MISSING)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    total, warmup, rate = get("total_frames"), get("warmup_frames"), get("updates_per_frame")
    if None not in (total, warmup, rate) and rate > 0 and total <= warmup:
        raise ConfigError(f"data.total_frames ({total}) must exceed data.warmup_frames ({warmup}): learning starts "
                          "after the warm-up, so this run would learn nothing (raise total_frames or lower "
                          "warmup_frames)")


if __name__ == "__main__":  # pragma: no cover - a quick look: python -m sun_lightning.run.precheck fit --config ...
    check(sys.argv[1:])
