"""The three gridworlds of the paper: ThreeRoom, FourRoomStuck and GridMaze (SPEC §6), and gridworlds of a user's
own map (``data.layout``: :func:`register_layout`), as gymnasium environments.

Each world is parsed once from its ASCII layout (:mod:`sun_lightning.envconfig.layout`) into a :class:`GridLayout` holding
the whole dynamics as arrays: ``next_tile[tile, action]``, ``random_tile[tile]``
(Q tiles), ``terminal[tile, action]`` and ``start_probs[tile]``. Both the single
:class:`GridworldEnv` (for :func:`gymnasium.make`) and the batched
:class:`GridworldVectorEnv` (for :func:`gymnasium.make_vec`) step through the same
:meth:`GridLayout.transition`, so they draw random numbers in the same order:
a vector env of one sub-environment and a single env seeded alike produce the
same trajectory.

Observations are the one-hot tile over *all* ``rows * cols`` cells (flat index
``row * cols + col``), rewards are always 0 (reward-free exploration, SPEC §1).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sun_lightning.envconfig.layout import LAYOUTS, GridLayout, layout_name, parse_layout
from sun_lightning.envs.eval_goals import EvalGoals, register_eval_goals, with_actions
from sun_lightning.envs.registry import (NAMESPACE, GoalSpace, end_step, env_ids, refuse_ended, register, reset_mask,
                                         torchrl_autoreset_mode)


def _spaces(layout: GridLayout) -> tuple[spaces.Box, spaces.Discrete]:
    observation_space = spaces.Box(0.0, 1.0, shape=(layout.num_tiles,), dtype=np.float32)
    return observation_space, spaces.Discrete(layout.num_actions)


class GridworldEnv(gymnasium.Env):
    """One gridworld agent (SPEC §6); build it with :func:`gymnasium.make`.

    The horizon comes from the registration's ``max_episode_steps`` (gymnasium's
    ``TimeLimit``), so a bare instance never truncates.

    Args:
        layout: a key of :data:`LAYOUTS`.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, layout: str) -> None:
        self.layout = LAYOUTS[layout]
        self.observation_space, self.action_space = _spaces(self.layout)
        self._tile: np.ndarray | None = None  # shape [1], fed to the batched kernel

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._tile = self.layout.sample_starts(self.np_random, 1)
        return self.layout.one_hot(self._tile[0]), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._tile is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} for {self.action_space}")
        self._tile, terminated = self.layout.transition(
            self._tile, np.array([action], dtype=np.int64), self.np_random
        )
        return self.layout.one_hot(self._tile[0]), 0.0, bool(terminated[0]), False, {}


class GridworldVectorEnv(VectorEnv):
    """``num_envs`` agents in one gridworld, stepped with array ops (SPEC §6).

    Two of gymnasium's autoreset modes, as :class:`gymnasium.vector.SyncVectorEnv` has them:

    - ``SAME_STEP`` (the default): a sub-environment that terminates or reaches
      the horizon returns its reset observation, with the last observation in
      ``info["final_obs"]`` (masks ``info["_final_obs"]``,
      ``info["final_info"]``/``info["_final_info"]``).
    - ``DISABLED`` (what the trainer uses): the step that ends an episode
      returns its true last observation, and that sub-environment must be reset
      with ``reset(options={"reset_mask": mask})`` before it is stepped again.
      TorchRL's ``GymWrapper`` issues these partial resets itself, so it needs
      neither a terminal-observation reader nor its observation swap on every step.

    One generator, seeded by :meth:`reset`, drives spawns and Q tiles of all
    sub-environments, in the same order in both modes.

    Args:
        layout: a key of :data:`LAYOUTS`.
        num_envs: number of sub-environments.
        max_episode_steps: horizon; the layout's own when ``None``.
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an :class:`~gymnasium.vector.AutoresetMode` or its value).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        layout: str,
        num_envs: int = 1,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
    ) -> None:
        mode = torchrl_autoreset_mode(autoreset_mode)
        # TorchRL's GymWrapper reads the mode from this attribute, not from metadata.
        self.autoreset_mode = mode
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.layout = LAYOUTS[layout]
        self.num_envs = num_envs
        self.horizon = self.layout.horizon if max_episode_steps is None else max_episode_steps
        self.single_observation_space, self.single_action_space = _spaces(self.layout)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._tiles: np.ndarray | None = None
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._ended = np.zeros(num_envs, dtype=bool)  # DISABLED mode: episodes over, awaiting their reset

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every sub-environment, or only those of ``options["reset_mask"]`` (``[num_envs]`` bool).

        Returns the observations of all sub-environments (the others' unchanged). A ``seed`` reseeds the
        one generator of all sub-environments, with a mask too.
        """
        mask = reset_mask(options, self.num_envs)
        if mask is None or self._tiles is None:
            super().reset(seed=seed)
            mask = np.ones(self.num_envs, dtype=bool)
        elif seed is not None:
            super().reset(seed=seed)
        self._restart(mask)
        return self.layout.one_hot(self._tiles), {}

    def _restart(self, mask: np.ndarray) -> None:
        """Spawn the sub-environments of ``mask`` afresh."""
        starts = self.layout.sample_starts(self.np_random, int(mask.sum()))
        if self._tiles is None:
            self._tiles = starts
        else:
            self._tiles[mask] = starts
        self._elapsed[mask] = 0
        self._ended[mask] = False

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._tiles is None:
            raise RuntimeError("call reset() before step()")
        refuse_ended(self._ended)
        actions = np.asarray(actions)
        num_actions = self.layout.num_actions
        # one comparison checks both bounds: negative ints wrap to huge unsigned ones
        if actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu" or actions.astype(np.uint64).max() >= num_actions:
            raise ValueError(f"actions must be {self.num_envs} ints in [0, {num_actions}), got {actions}")
        self._tiles, terminated = self.layout.transition(self._tiles, actions.astype(np.int64), self.np_random)
        self._elapsed += 1
        # Like gymnasium's TimeLimit: truncated at the horizon even if terminated too.
        truncated = self._elapsed >= self.horizon
        obs = self.layout.one_hot(self._tiles)
        done = terminated | truncated
        obs, infos = end_step(self, obs, done, lambda: self.layout.one_hot(self._tiles))
        return obs, np.zeros(self.num_envs), terminated, truncated, infos


def _register(env_id: str, key: str) -> None:
    """Register the gridworld ``LAYOUTS[key]`` and its goal space under ``env_id`` (SPEC §2, §6)."""
    layout = LAYOUTS[key]
    register(
        env_id,
        GoalSpace(
            obs_dim=layout.num_tiles,
            num_actions=layout.num_actions,
            goal_dims=None,
            low=(),
            high=(),
            reach="exact",
            exact_counts=True,
            coverable=layout.coverable,
            grid_shape=(layout.rows, layout.cols),
        ),
        entry_point=f"{__name__}:GridworldEnv",
        vector_entry_point=f"{__name__}:GridworldVectorEnv",
        max_episode_steps=layout.horizon,
        kwargs={"layout": key},
    )
    register_eval_goals(env_id, functools.partial(eval_goals, key))


def eval_goals(key: str) -> EvalGoals:
    """The evaluation goals of gridworld ``LAYOUTS[key]``: every tile where an action can be taken × every goal
    action."""
    layout = LAYOUTS[key]
    tiles = torch.tensor(layout.coverable)
    return with_actions(torch.eye(layout.num_tiles)[tiles], layout.num_actions)


def _register_all() -> None:
    """Register the three gridworlds of the paper (SPEC §6)."""
    for name in LAYOUTS:
        _register(f"{NAMESPACE}/{name}-v0", name)


_register_all()
#: The ids of the gridworlds built from layout strings in this process.
_FROM_LAYOUTS: set[str] = set()


def register_layout(env_id: str, text: str) -> None:
    """Register ``env_id`` as the gridworld of a layout string (``data.layout``), with :func:`parse_layout`'s defaults.

    The layout is kept in :data:`LAYOUTS` under its id, so everything that finds a gridworld by its id (the
    DataModule, heatmaps) finds it. Registering an id again with another layout replaces the first.

    Raises:
        ConfigError: the id is not of the form ``sun_lightning/<Name>-v<N>`` or names a built-in environment,
            or the layout is not valid (:func:`parse_layout`).
    """
    LAYOUTS[env_id] = parse_layout(text, name=layout_name(env_id, set(env_ids()) - _FROM_LAYOUTS))
    gymnasium.registry.pop(env_id, None)  # another layout under the same id: the new one
    _register(env_id, env_id)
    _FROM_LAYOUTS.add(env_id)
