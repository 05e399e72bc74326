"""What ``data.goal`` says and what it means against an observation space (SPEC §2, §4): :class:`GoalConfig`, the
flat layout of a Box or goal-dict observation, and the observation entries the goal is.

numpy and gymnasium only, so that the pre-check (:mod:`sun_lightning.run.precheck_env`) judges ``data.goal.dims``
against a gymnasium env's observation before torch is imported; :mod:`sun_lightning.envs.custom` builds the goal space
from the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import gymnasium
import numpy as np

from sun_lightning.errors import ConfigError

#: The goal-dict entry that is the env's task, not the agent's state: never part of the flat observation.
DESIRED_GOAL = "desired_goal"
#: The goal-dict entry the goal is taken from when ``dims`` is not given.
ACHIEVED_GOAL = "achieved_goal"


@dataclass
class GoalConfig:
    """The goal space of an environment given by its gymnasium id (``data.goal``; SPEC §2, §4).

    Attributes:
        dims: the goal g_s: these entries of the flat observation, or the name of a goal-dict entry
            (``achieved_goal``); ``None``: the whole observation of a Box, ``achieved_goal`` of a goal dict.
        low, high: per-goal-dimension bounds: the metrics' range (coverage and entropy over 50 bins each, SPEC §7)
            and the range of uniform goals (TD3 variant); ``None``: the observation space's, where finite;
            ``auto``: the extent of a maze's free cells, read from its map (Gymnasium-Robotics' PointMaze and
            AntMaze, whose goal is the (x, y) position: :mod:`sun_lightning.envs.maze_map`).
        reach: ``radius`` (within ρ in the standardized goal space, SPEC §4) or a distance in goal units
            (Euclidean distance below it, SPEC §2).
        rho: pseudocount radius in the standardized goal space (SPEC §4).
        with_action: discrete actions are part of the goal (SPEC §2); ``None``: exactly when actions are discrete
            (the DQN variant's goals always carry one, continuous actions never do).
        names: each goal dimension's name, for the heatmaps' axes; ``None``: ``achieved_goal[0]``, ... (the goal
            dict entry and index), or ``obs[<index>]`` of a Box observation.
    """

    dims: list[int] | str | None = None
    low: list[float] | Literal["auto"] | None = None
    high: list[float] | Literal["auto"] | None = None
    reach: float | str = "radius"
    rho: float = 0.1
    with_action: bool | None = None
    names: list[str] | None = None


def observation_layout(space: gymnasium.Space, env_id: str) -> tuple[dict[str, slice] | None, np.ndarray, np.ndarray]:
    """Where each goal-dict entry lies in the flat observation (``None`` for a Box), and the flat bounds.

    Raises:
        ConfigError: the observation is neither a 1-d Box nor a dict of 1-d Boxes.
    """
    def flat_box(box: gymnasium.Space) -> bool:
        return isinstance(box, gymnasium.spaces.Box) and len(box.shape) == 1

    if flat_box(space):
        return None, space.low.astype(np.float32), space.high.astype(np.float32)
    if isinstance(space, gymnasium.spaces.Dict) and all(flat_box(entry) for entry in space.spaces.values()):
        keys = sorted((key for key in space.spaces if key != DESIRED_GOAL), key=lambda key: key != "observation")
        if keys:
            slices, start = {}, 0
            for key in keys:
                slices[key] = slice(start, start + space[key].shape[0])
                start = slices[key].stop
            low = np.concatenate([space[key].low.astype(np.float32) for key in keys])
            high = np.concatenate([space[key].high.astype(np.float32) for key in keys])
            return slices, low, high
    raise ConfigError(f"data.env_id: {env_id}'s observation space is {space}: sun_lightning takes a flat Box or a "
                      "goal dict (1-d Boxes such as observation/achieved_goal/desired_goal)")


def goal_dims_of(env_id: str, dims: list[int] | str | None, observation_space: gymnasium.Space
                 ) -> tuple[dict[str, slice] | None, np.ndarray, np.ndarray, tuple[int, ...]]:
    """:func:`observation_layout` of ``observation_space`` and the flat observation entries the goal is
    (``dims`` as :attr:`GoalConfig.dims` gives them).

    Raises:
        ConfigError: a dict entry the observation lacks, indices outside it or repeated.
    """
    slices, obs_low, obs_high = observation_layout(observation_space, env_id)
    obs_dim = len(obs_low)
    dims = dims if dims is not None else (ACHIEVED_GOAL if slices and ACHIEVED_GOAL in slices else None)
    if isinstance(dims, str):
        if not slices or dims not in slices:
            entries = f"its entries are {', '.join(slices)}" if slices else "its observation is a Box, not a dict"
            raise ConfigError(f"data.goal.dims: {env_id} has no observation entry {dims!r} ({entries})")
        dims = list(range(slices[dims].start, slices[dims].stop))
    elif dims is not None:
        dims = [int(d) for d in dims]
        outside = [d for d in dims if not 0 <= d < obs_dim]
        if outside:
            raise ConfigError(f"data.goal.dims: {outside} outside the observation of {env_id} ({obs_dim} entries: "
                              f"0 to {obs_dim - 1})")
        if not dims or len(set(dims)) != len(dims):
            raise ConfigError(f"data.goal.dims must name distinct observation entries, got {dims}")
    goal_dims = tuple(dims) if dims is not None else tuple(range(obs_dim))
    return slices, obs_low, obs_high, goal_dims
