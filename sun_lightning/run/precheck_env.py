"""The pre-check's part for an environment given by its gymnasium id: ``data.goal`` (its keys, their types and
domains) and ``data.env_id`` against gymnasium's registry, before torch, Lightning or MuJoCo are imported.

The keys are :class:`~sun_lightning.envs.custom.GoalConfig`'s fields, read from its source; each error is the line
the live check (:mod:`sun_lightning.envs.custom`) gives, the key named as the user wrote it (``data.goal.reach``,
never the parser's ``data.goal.init_args.reach``). What needs the env itself (dims against its observation, ``auto``
bounds against its maze, actions against the learner) stays with the live check. The id is looked up only where
gymnasium alone can know it, or the package's own list (``sun_lightning/...``: :data:`PACKAGE_IDS`): not a gridworld
of ``data.layout``, nor one a package registers (``data.env_package``, ``module:Id``), whose import may pull in MuJoCo.
"""

from __future__ import annotations

import ast
import difflib
import math

from sun_lightning.errors import HELP_HINT, ConfigError, no_goal_space, unknown_environment

#: Where the goal space's fields are declared (a dataclass: its annotated class attributes).
GOAL_CLASS = ("sun_lightning.envs.custom", "GoalConfig")
NAMESPACE = "sun_lightning/"
#: The package's own environments (SPEC §6), known here without importing their modules (torch, MuJoCo, Box2D);
#: ``tests/unit/run/test_precheck.py`` holds this list to the registry.
PACKAGE_IDS = tuple(f"{NAMESPACE}{name}-v0" for name in (
    "Acrobot", "AntMazeH", "AntMazeS", "ArmPushH", "CartPole", "FourRoomStuck", "GridMaze", "LunarLander",
    "LunarLanderFull", "MountainCar", "Pendulum", "PointMazeH", "PointMazeS", "ThreeRoom"))


def goal_keys(find_class) -> list[str] | None:
    """The fields of ``GoalConfig`` (``find_class``: the pre-check's source reader), ``None`` where unreadable."""
    found = find_class(*GOAL_CLASS)
    if found is None:
        return None
    return [node.target.id for node in found[1].body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expected(key: str, what: str, value) -> ConfigError:
    return ConfigError(f"data.goal.{key}: expected {what}, got {value!r} ({HELP_HINT})")


def check_goal(goal: dict) -> None:
    """Each ``data.goal`` value's type and domain, as :func:`~sun_lightning.envs.custom.goal_space_of` checks them."""
    dims = goal.get("dims")
    if dims is not None and not isinstance(dims, str) and not (
            isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims)):
        raise _expected("dims", "a list of observation indices or a goal-dict entry such as achieved_goal", dims)
    if isinstance(dims, list) and (not dims or len(set(dims)) != len(dims)):  # (outside the observation: live)
        raise ConfigError(f"data.goal.dims must name distinct observation entries, got {dims}")
    bounds = {}
    for side in ("low", "high"):
        value = goal.get(side)
        if isinstance(value, str) and value != "auto":
            raise ConfigError(f"data.goal.{side} must be a list of numbers or auto, got {value!r}")
        if value is not None and not isinstance(value, str):
            if not isinstance(value, list) or not all(_number(v) for v in value):
                raise _expected(side, "a list of numbers or auto", value)
            if not all(math.isfinite(v) for v in value):
                raise ConfigError(f"data.goal.{side} must be finite (the metrics bin the goal space), got {value}")
            bounds[side] = [float(v) for v in value]
    if len(bounds) == 2 and len(bounds["low"]) == len(bounds["high"]):
        for d, (lo, hi) in enumerate(zip(bounds["low"], bounds["high"])):
            if not lo < hi:
                raise ConfigError(f"data.goal.low[{d}] ({lo}) must be below data.goal.high[{d}] ({hi})")
    rho = goal.get("rho", 0.1)
    if not _number(rho):
        raise _expected("rho", "float", rho)
    if not rho > 0:
        raise ConfigError(f"data.goal.rho must be positive, got {float(rho)}")
    reach = goal.get("reach", "radius")
    if reach != "radius" and not (_number(reach) and 0 < reach < math.inf):
        raise ConfigError(f"data.goal.reach must be radius or a distance > 0 in goal units, got {reach!r}")
    if goal.get("with_action") is not None and not isinstance(goal["with_action"], bool):
        raise _expected("with_action", "bool", goal["with_action"])
    names = goal.get("names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise _expected("names", "a list of names, one per goal dimension", names)


def check_env_id(values: dict) -> None:
    """``data.env_id`` against gymnasium's registry where gymnasium alone knows it (see the module docstring), and a
    gymnasium id without ``data.goal`` named as such."""
    env_id = values.get("data.env_id")
    if not isinstance(env_id, str) or ":" in env_id or values.get("data.env_package") or values.get("data.layout"):
        return
    if env_id.startswith(NAMESPACE):  # with data.goal, an id gymnasium is asked for (after the package's import)
        if env_id not in PACKAGE_IDS and values.get("data.goal") is None:
            raise ConfigError(unknown_environment(env_id, PACKAGE_IDS))
        return
    import gymnasium  # its registry names every id it ships, without importing their modules (no MuJoCo, no Box2D)

    if env_id not in gymnasium.registry:
        close = difflib.get_close_matches(env_id, sorted(gymnasium.registry), n=3, cutoff=0.5)
        hint = f"closest registered: {', '.join(close)}" if close else "no registered id is close"
        raise ConfigError(f"data.env_id: gymnasium does not know {env_id!r} ({hint}; a package of your own is "
                          "imported with data.env_package)")
    if values.get("data.goal") is None:
        raise ConfigError(no_goal_space(env_id))
