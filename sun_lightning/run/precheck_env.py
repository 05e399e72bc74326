"""The pre-check's part for the environment, before torch, Lightning or MuJoCo are imported: ``data.goal`` (its
keys, their types and domains), ``data.env_id`` against gymnasium's registry, ``data.layout``, the goal dims against a
gymnasium env's observation, and the env's actions for the learner's family.

The keys are :class:`~sun_lightning.envconfig.goal.GoalConfig`'s fields, read from its source; each error is the line
the live check gives, from the same code where it can run without torch (:mod:`sun_lightning.envconfig`), the key
named as the user wrote it (``data.goal.reach``, never the parser's ``data.goal.init_args.reach``). The id is looked
up where gymnasium alone can know it, or in the package's own table (``sun_lightning/...``: :data:`PACKAGE_ACTIONS`);
not one a package registers (``data.env_package``, ``module:Id``): importing a user's package is the live check's.
A gymnasium id with ``data.goal`` is made once (``gymnasium.make``) for its spaces; what cannot be made, and
``auto`` bounds against a maze, stay with the live check.
"""

from __future__ import annotations

import ast
import difflib
import math

from sun_lightning.errors import HELP_HINT, ConfigError, no_goal_space, unknown_environment

#: Where the goal space's fields are declared (a dataclass: its annotated class attributes).
GOAL_CLASS = ("sun_lightning.envconfig.goal", "GoalConfig")
NAMESPACE = "sun_lightning/"
#: The package's own environments (SPEC §6) and their actions (discrete, and how many; or a Box, and its
#: dimension), known here without importing their modules (torch, MuJoCo, Box2D); ``tests/unit/run/test_precheck.py``
#: holds this table to the registry.
PACKAGE_ACTIONS = {f"{NAMESPACE}{name}-v0": actions for name, actions in {
    "Acrobot": (True, 3), "AntMazeH": (False, 8), "AntMazeS": (False, 8), "ArmPushH": (False, 5),
    "CartPole": (True, 2), "FourRoomStuck": (True, 4), "GridMaze": (True, 9), "LunarLander": (True, 4),
    "LunarLanderFull": (True, 4), "MountainCar": (True, 3), "Pendulum": (True, 8), "PointMazeH": (False, 4),
    "PointMazeS": (False, 2), "ThreeRoom": (True, 4)}.items()}
PACKAGE_IDS = tuple(PACKAGE_ACTIONS)


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


def check_layout(values: dict) -> None:
    """``data.layout`` parsed and its id checked as :func:`~sun_lightning.envs.gridworlds.register_layout` does
    (numpy only: a tenth of a second)."""
    layout, env_id = values.get("data.layout"), values.get("data.env_id")
    if not isinstance(layout, str) or not isinstance(env_id, str):
        return
    from sun_lightning.envconfig.layout import layout_name, parse_layout

    parse_layout(layout, name=layout_name(env_id, PACKAGE_IDS))


def actions_of(values: dict) -> tuple[bool, int] | None:
    """The env's actions as ``(discrete, size)`` where they can be known before torch: a package id from
    :data:`PACKAGE_ACTIONS`, a gridworld of ``data.layout`` (4 actions), a gymnasium id with ``data.goal`` from the
    env gymnasium makes (after :func:`check_spaces`); ``None`` otherwise (left to the live check)."""
    env_id = values.get("data.env_id")
    if not isinstance(env_id, str) or values.get("data.env_package") or ":" in env_id:
        return None
    if isinstance(values.get("data.layout"), str):
        return True, 4
    if values.get("data.goal") is None:
        return PACKAGE_ACTIONS.get(env_id)
    return _spaces(env_id)[1]


def check_spaces(values: dict) -> None:
    """``data.goal.dims`` against the observation of a gymnasium id given with ``data.goal``
    (:func:`~sun_lightning.envconfig.goal.goal_dims_of`, the live check's rule)."""
    env_id, goal = values.get("data.env_id"), values.get("data.goal")
    if (not isinstance(env_id, str) or not isinstance(goal, dict) or values.get("data.env_package") or ":" in env_id
            or env_id.startswith(NAMESPACE)):
        return
    observation_space = _spaces(env_id)[0]
    if observation_space is not None:
        from sun_lightning.envconfig.goal import goal_dims_of

        goal_dims_of(env_id, goal.get("dims"), observation_space)


_SPACES: dict[str, tuple] = {}


def _spaces(env_id: str) -> tuple:
    """The observation space and ``(discrete, size)`` actions of a gymnasium id, from the env it makes (MuJoCo's
    ids import MuJoCo: half a second); ``(None, None)`` where making it fails (the live check says why) or the
    actions are neither Discrete nor a 1-d Box."""
    if env_id not in _SPACES:
        import gymnasium

        try:
            env = gymnasium.make(env_id)
        except Exception:  # noqa: BLE001 - whatever stops the env is the live check's to report
            _SPACES[env_id] = None, None
            return _SPACES[env_id]
        action = env.action_space
        env.close()
        if isinstance(action, gymnasium.spaces.Discrete) and action.start == 0:
            actions = True, int(action.n)
        elif isinstance(action, gymnasium.spaces.Box) and len(action.shape) == 1:
            actions = False, int(action.shape[0])
        else:
            actions = None
        _SPACES[env_id] = env.observation_space, actions
    return _SPACES[env_id]
