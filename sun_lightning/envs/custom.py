"""A researcher's own environment: any id :func:`gymnasium.make` knows, with its goal space given in the config
(SPEC §2, §4, §6).

``data.goal`` (:class:`GoalConfig`) says what SPEC §6's table says for the package's own environments: the goal
projection g_s (observation entries, or a key of a goal dict such as ``achieved_goal``), its bounds, the reach rule
and the pseudocount radius ρ. :class:`CustomEnv` checks it against the environment before anything runs (one
:class:`~sun_lightning.errors.ConfigError` line each), records the :class:`GoalSpace` under the id, and builds the
vector env the way the package's own are built: gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv``, an autoreset
mode TorchRL takes (the trainer uses ``DISABLED``), per-env seeds ``seed + i`` from one reset.

Observations reach the trainer as one flat float32 vector (:class:`FlatGoalObservation`): a 1-d Box as it is, a goal
dict (Gymnasium-Robotics' ``observation``/``achieved_goal``/``desired_goal``) as its entries concatenated, the task's
``desired_goal`` left out (reward-free exploration: the env's own task and reward are ignored). Continuous actions are
rescaled to the learners' [−1, 1] where the env's bounds differ.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import math
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium
import numpy as np

from sun_lightning.checkpoints import safe_pickle
from sun_lightning.envconfig.goal import ACHIEVED_GOAL, GoalConfig, goal_dims_of, observation_layout
from sun_lightning.envs.maze_map import MazeMap, maze_map_of, record_maze
from sun_lightning.envs.registry import GoalSpace, env_ids, record, torchrl_autoreset_mode
from sun_lightning.errors import ConfigError

__all__ = ["CustomEnv", "FlatGoalObservation", "GoalConfig", "custom_env", "env_modules", "import_env_package",
           "make_one"]

def import_env_package(package: str | None, env_id: str) -> str:
    """Import ``data.env_package`` and the module of an ``module:Id`` env id (gymnasium's own convention), so that
    their ``gymnasium.register`` calls run; returns the id without its module part."""
    module, _, bare = env_id.rpartition(":")
    for name, key in ((package, "data.env_package"), (module, "data.env_id")):
        if not name:
            continue
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ConfigError(f"{key}: cannot import {name!r} ({error}): install the package or put it on "
                              "PYTHONPATH") from None
    return bare


def env_modules(gym_id: str, env_package: str | None = None) -> tuple[str, ...]:
    """The modules an env is built from: ``env_package`` and the module of the id's registered entry point (a
    ``module:Class`` string, or the callable's module). A resumed run trusts their classes in its checkpoint's env
    state (:func:`~sun_lightning.checkpoints.safe_pickle.trust`): they are imported already to make the env."""
    module, _, bare = gym_id.rpartition(":")
    spec = gymnasium.registry.get(bare)
    entry = getattr(spec, "entry_point", None)
    entry_module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)
    return tuple(name for name in (env_package, module, entry_module) if name)


def custom_env(env_id: str, goal: GoalConfig | None, env_package: str | None = None,
               vector: Literal["sync", "async"] = "sync") -> CustomEnv | None:
    """The DataModule's part: ``env_id`` with ``data.goal`` as a :class:`CustomEnv`, or ``None`` for a registered id
    (after importing ``env_package``, which may register environments with their goal spaces itself)."""
    if goal is not None:
        return CustomEnv(env_id, goal, env_package, vector)
    import_env_package(env_package, env_id)
    safe_pickle.trust(*env_modules(env_id, env_package))
    if vector != "sync":
        raise ConfigError(f"data.vector: {vector} applies to an environment given with data.goal; {env_id} has "
                          "its own vector env")
    return None


def _check_known(env_id: str) -> None:
    """A one-line error for an id gymnasium does not know, with the closest registered ids."""
    if env_id in gymnasium.registry:
        return
    known = sorted(set(gymnasium.registry) | set(env_ids()))
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f"closest registered: {', '.join(close)}" if close else "no registered id is close"
    raise ConfigError(f"data.env_id: gymnasium does not know {env_id!r} ({hint}; a package of your own is "
                      "imported with data.env_package)")


class FlatGoalObservation(gymnasium.ObservationWrapper):
    """One flat float32 observation vector: a 1-d Box as is, a goal dict's entries concatenated.

    A goal dict is a ``Dict`` of 1-d Boxes; ``observation`` comes first, then the other entries in the space's
    order, without ``desired_goal`` (the env's task). ``slices`` says where each entry lies in the flat vector.
    The wrapped env's observation space is assumed checked (:func:`observation_layout`).
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.slices, low, high = observation_layout(env.observation_space, str(env.spec.id if env.spec else env))
        self.observation_space = gymnasium.spaces.Box(low, high, low.shape, np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        if self.slices is None:
            return np.asarray(observation, dtype=np.float32)
        return np.concatenate([np.asarray(observation[key], dtype=np.float32).reshape(-1) for key in self.slices])


def make_one(env_id: str, env_package: str | None = None, rescale: bool = False) -> gymnasium.Env:
    """One sub-environment: ``gymnasium.make(env_id)`` (its own horizon), a flat float32 observation, and continuous
    actions in [−1, 1] when ``rescale``. Module level (a partial of it pickles), so async workers build it too,
    importing ``env_package`` first."""
    import_env_package(env_package, env_id)
    env = FlatGoalObservation(gymnasium.make(env_id))
    if rescale:
        space = env.action_space  # bounds in its own dtype: gymnasium warns about float64 ones cast down
        env = gymnasium.wrappers.RescaleAction(env, np.full(space.shape, -1, space.dtype), np.full(space.shape, 1, space.dtype))
    return env


class CustomEnv:
    """An environment given by its gymnasium id and ``data.goal``: checked, its goal space recorded, vectorised.

    Args:
        env_id: any id :func:`gymnasium.make` knows (``module:Id`` imports ``module`` first).
        goal: the goal space (:class:`GoalConfig`).
        env_package: a module imported first, for the ``gymnasium.register`` calls of the user's package.
        vector: ``sync`` (in-process ``SyncVectorEnv``) or ``async`` (``AsyncVectorEnv``, one process per env).

    Raises:
        ConfigError: one line naming the problem (unknown id, observation or action space sun_lightning cannot
            take, dims outside the observation, bounds, reach, ρ).
    """

    def __init__(self, env_id: str, goal: GoalConfig, env_package: str | None = None,
                 vector: Literal["sync", "async"] = "sync") -> None:
        if vector not in ("sync", "async"):
            raise ConfigError(f"data.vector must be sync or async, got {vector!r}")
        self.env_id, self.env_package, self.vector = env_id, env_package, vector
        self.gym_id = import_env_package(env_package, env_id)
        _check_known(self.gym_id)
        safe_pickle.trust(*env_modules(env_id, env_package))  # its checkpoints name these classes
        env = gymnasium.make(self.gym_id)
        try:
            self.maze = maze_map_of(env)
            self.space, self.rescale = goal_space_of(env_id, goal, env.observation_space, env.action_space, self.maze)
        finally:
            env.close()
        record(env_id, self.space)
        record_maze(env_id, self.maze)

    def make_vec(self, num_envs: int,
                 autoreset_mode: gymnasium.vector.AutoresetMode | str = gymnasium.vector.AutoresetMode.DISABLED
                 ) -> gymnasium.vector.VectorEnv:
        """``num_envs`` sub-environments in gymnasium's sync or async vector env, in an autoreset mode TorchRL takes
        (``DISABLED`` by default: the trainer resets ended envs itself, as for the package's own envs)."""
        mode = torchrl_autoreset_mode(autoreset_mode)
        fns = [functools.partial(make_one, self.gym_id, self.env_package, self.rescale)] * num_envs
        if self.vector == "async":
            return gymnasium.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
        return gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def goal_space_of(env_id: str, goal: GoalConfig, observation_space: gymnasium.Space,
                  action_space: gymnasium.Space, maze: MazeMap | None = None) -> tuple[GoalSpace, bool]:
    """The :class:`GoalSpace` ``goal`` gives the env, and whether its continuous actions need rescaling to [−1, 1]
    (``maze``: the env's maze map, where it has one, for ``low``/``high`` ``auto``).

    Raises:
        ConfigError: as :class:`CustomEnv`.
    """
    slices, obs_low, obs_high, goal_dims = goal_dims_of(env_id, goal.dims, observation_space)
    obs_dim = len(obs_low)
    names = _goal_names(goal.names, goal_dims, slices, maze)
    low = _bounds("low", goal.low, obs_low[list(goal_dims)], env_id, maze, 0)
    high = _bounds("high", goal.high, obs_high[list(goal_dims)], env_id, maze, 1)
    for name, values in (("low", low), ("high", high)):
        if len(values) != len(goal_dims):
            raise ConfigError(f"data.goal.{name} has {len(values)} values, the goal {len(goal_dims)} dimensions "
                              f"(dims {list(goal_dims)})")
    for d, (lo, hi) in enumerate(zip(low, high)):
        if not lo < hi:
            raise ConfigError(f"data.goal.low[{d}] ({lo}) must be below data.goal.high[{d}] ({hi})")
    if not goal.rho > 0:
        raise ConfigError(f"data.goal.rho must be positive, got {goal.rho}")
    reach, eta = "radius", 0.0
    if goal.reach != "radius":
        try:
            eta = float(goal.reach)
        except ValueError:
            eta = math.nan
        if not eta > 0 or math.isinf(eta):
            raise ConfigError(f"data.goal.reach must be radius or a distance > 0 in goal units, got {goal.reach!r}")
        reach = "distance"
    if isinstance(action_space, gymnasium.spaces.Discrete) and action_space.start == 0:
        if goal.with_action is False:
            raise ConfigError(f"data.goal.with_action: {env_id}'s actions are discrete and the DQN variant's goals "
                              "include the action (SPEC §2, §5a): leave with_action out or set it true")
        num_actions, action_dim, rescale = int(action_space.n), 0, False
    elif isinstance(action_space, gymnasium.spaces.Box) and len(action_space.shape) == 1:
        if goal.with_action:
            raise ConfigError(f"data.goal.with_action: {env_id}'s actions are continuous (a Box): a goal cannot "
                              "include one (SPEC §2); set it false or leave it out")
        if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
            raise ConfigError(f"data.env_id: {env_id}'s action bounds are not finite ({action_space}): the TD3 "
                              "variant acts in a bounded box")
        num_actions, action_dim = 0, int(action_space.shape[0])
        rescale = not (np.all(action_space.low == -1.0) and np.all(action_space.high == 1.0))
    else:
        raise ConfigError(f"data.env_id: {env_id}'s action space is {action_space}: sun_lightning takes Discrete "
                          "actions (DQN variant) or a 1-d Box (TD3 variant)")
    space = GoalSpace(obs_dim=obs_dim, num_actions=num_actions, action_dim=action_dim,
                      goal_dims=None if goal_dims == tuple(range(obs_dim)) else goal_dims,
                      low=low, high=high, rho=float(goal.rho), reach=reach, eta=eta, goal_names=names)
    return space, rescale


def _goal_names(given: list[str] | None, goal_dims: tuple[int, ...], slices: dict[str, slice] | None,
                maze: MazeMap | None = None) -> tuple[str, ...]:
    """Each goal dimension's name: ``given``; else ``x``, ``y`` for a maze's ``achieved_goal`` (its position on the
    map); else its goal-dict entry and index (``achieved_goal[0]``); else ``obs[<index>]``."""
    if given is not None:
        if len(given) != len(goal_dims):
            raise ConfigError(f"data.goal.names has {len(given)} names, the goal {len(goal_dims)} dimensions "
                              f"(dims {list(goal_dims)})")
        return tuple(str(name) for name in given)
    position = slices.get(ACHIEVED_GOAL) if slices else None
    if maze is not None and position is not None and goal_dims == tuple(range(position.start, position.stop)) \
            and len(goal_dims) == 2:
        return ("x", "y")

    def name(d: int) -> str:
        key = next((key for key, part in (slices or {}).items() if part.start <= d < part.stop), None)
        return f"{key}[{d - slices[key].start}]" if key is not None else f"obs[{d}]"

    return tuple(name(d) for d in goal_dims)


def _bounds(name: str, given: list[float] | str | None, observed: np.ndarray, env_id: str, maze: MazeMap | None,
            side: int) -> tuple[float, ...]:
    """``data.goal.low``/``high``; for ``auto`` the maze's free extent (``side`` 0: low, 1: high); else the observation
    space's bounds of the goal dims where all are finite."""
    if isinstance(given, str):
        if given != "auto":
            raise ConfigError(f"data.goal.{name} must be a list of numbers or auto, got {given!r}")
        if maze is None:
            raise ConfigError(f"data.goal.{name}: auto reads a maze's map (Gymnasium-Robotics' PointMaze and AntMaze); "
                              f"{env_id} has none: give the goal bounds")
        return maze.free_bounds()[side]
    if given is not None:
        values = tuple(float(v) for v in given)
        if not all(math.isfinite(v) for v in values):
            raise ConfigError(f"data.goal.{name} must be finite (the metrics bin the goal space), got {list(given)}")
        return values
    if not np.isfinite(observed).all():
        raise ConfigError(f"data.goal.{name}: {env_id}'s observation space leaves the goal unbounded "
                          f"({observed.tolist()}): give the goal bounds")
    return tuple(float(v) for v in observed)
