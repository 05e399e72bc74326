"""Environment registration with the goal-space facts SUN needs (SPEC §2, §4, §6).

Every environment of the package is registered with gymnasium under the
``sun_lightning/`` namespace *and* records a :class:`GoalSpace` here, so that the
goal projection, bounds, pseudocount radius and reach rule live with the
environment, not in the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium
import numpy as np
import torch

from sun_lightning.envconfig.layout import NAMESPACE
from sun_lightning.errors import ConfigError, no_goal_space, unknown_environment

ReachRule = Literal["exact", "radius", "distance"]


@dataclass(frozen=True)
class GoalSpace:
    """What a goal is in one environment.

    Attributes:
        obs_dim: size of the flat observation vector.
        num_actions: number of discrete actions, or 0 for continuous actions.
        action_dim: size of the continuous action vector (0 when discrete).
        goal_dims: indices of the observation that form the goal projection g_s,
            or ``None`` when g_s is the whole observation (gridworlds, LunarLanderFull).
        low, high: per-goal-dimension bounds used by the metrics (SPEC §6, §7);
            ``inf`` where a side is unbounded.
        rho: pseudocount radius in standardized goal space (SPEC §4).
        reach: ``"exact"`` (gridworlds: same tile and action), ``"radius"``
            (classic control: same action and within ``rho`` standardized) or
            ``"distance"`` (continuous actions: Euclidean distance below ``eta``).
        eta: reach threshold for ``reach == "distance"``.
        exact_counts: pseudocount is an exact (tile, action) visit count.
        coverable: for gridworlds, the flat tile indices whose (tile, action)
            cells count for coverage (free tiles where an action can be taken).
        grid_shape: (rows, cols) of a gridworld, for heatmaps.
    """

    obs_dim: int
    num_actions: int
    goal_dims: tuple[int, ...] | None = None
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    rho: float = 0.1
    reach: ReachRule = "exact"
    eta: float = 0.0
    action_dim: int = 0
    exact_counts: bool = False
    coverable: tuple[int, ...] = ()
    grid_shape: tuple[int, int] | None = None
    metric_low: tuple[float, ...] = field(default=())
    metric_high: tuple[float, ...] = field(default=())
    #: each goal dimension's name on plots (``achieved_goal[0]``); empty: ``obs[<index>]``
    goal_names: tuple[str, ...] = field(default=())

    @property
    def discrete(self) -> bool:
        return self.num_actions > 0

    @property
    def goal_dim(self) -> int:
        return self.obs_dim if self.goal_dims is None else len(self.goal_dims)

    def project(self, obs: torch.Tensor) -> torch.Tensor:
        """Goal projection g_s of a batch of observations ``[..., obs_dim]``."""
        dims = self.goal_dims
        if dims is None:
            return obs
        if dims == tuple(range(dims[0], dims[0] + len(dims))):
            return obs[..., dims[0]:dims[0] + len(dims)]  # a view: no index tensor to copy to the device
        return obs[..., list(dims)]

    def tile(self, goal: torch.Tensor) -> torch.Tensor:
        """Tile index of a one-hot gridworld goal ``[..., obs_dim]`` (exact spaces only)."""
        return goal.argmax(-1)

    def cell(self, goal: torch.Tensor, goal_action: torch.Tensor) -> torch.Tensor:
        """Flat (tile, action) cell index of an exact goal; the exact pseudocount's key."""
        return self.tile(goal) * self.num_actions + goal_action.long()


_GOAL_SPACES: dict[str, GoalSpace] = {}


def torchrl_autoreset_mode(mode: gymnasium.vector.AutoresetMode | str) -> gymnasium.vector.AutoresetMode:
    """``mode`` (an ``AutoresetMode`` or its value) if TorchRL's ``GymWrapper`` takes it: ``SAME_STEP`` or
    ``DISABLED`` (it rejects ``NEXT_STEP``); the vector entry points' check of their ``autoreset_mode``."""
    mode = gymnasium.vector.AutoresetMode(mode)
    if mode not in (gymnasium.vector.AutoresetMode.SAME_STEP, gymnasium.vector.AutoresetMode.DISABLED):
        raise ValueError(f"autoreset_mode must be SAME_STEP or DISABLED (TorchRL's GymWrapper rejects NEXT_STEP), got {mode}")
    return mode


def reset_mask(options: dict[str, Any] | None, num_envs: int) -> np.ndarray | None:
    """``options["reset_mask"]`` checked (a bool array ``[num_envs]``), or ``None`` when there is none."""
    mask = None if options is None else options.get("reset_mask")
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.shape != (num_envs,) or mask.dtype != np.bool_:
        raise ValueError(f"options['reset_mask'] must be a bool array of shape ({num_envs},), got {mask!r}")
    return mask


def refuse_ended(ended: np.ndarray) -> None:
    """Raise if a DISABLED-autoreset vector env is stepped before its ended sub-environments were reset."""
    if ended.any():
        raise RuntimeError(
            f"sub-environments {np.flatnonzero(ended).tolist()} ended their episodes: reset them with "
            "reset(options={'reset_mask': mask}) before stepping (autoreset mode DISABLED)"
        )


def end_step(env: Any, obs: np.ndarray, ended: np.ndarray,
             observe: Callable[[], np.ndarray]) -> tuple[np.ndarray, dict[str, Any]]:
    """The end of a vector step of the package's vector envs, by their autoreset mode.

    DISABLED marks the ended sub-environments in ``env._ended`` (the next step refuses them until a masked
    reset); SAME_STEP restarts them now (``env._restart(mask)``) and returns the new observations
    (``observe()``) with the ended ones' last observations in the info (:func:`final_obs_info`).
    """
    if env.autoreset_mode is gymnasium.vector.AutoresetMode.DISABLED:
        env._ended[:] = ended
        return obs, {}
    if not ended.any():
        return obs, {}
    infos = final_obs_info(obs, ended)
    env._restart(ended)
    return observe(), infos


def final_obs_info(obs: np.ndarray, ended: np.ndarray) -> dict[str, Any]:
    """The info of a SAME_STEP autoreset step: the ended sub-environments' last observations, in gymnasium's
    format (an object array of per-env arrays under ``final_obs``, with its mask and an empty ``final_info``)."""
    final_obs = np.full(len(ended), None, dtype=object)
    final_obs[ended] = np.fromiter(obs[ended], dtype=object, count=int(ended.sum()))
    return {"final_obs": final_obs, "_final_obs": ended.copy(), "final_info": {}, "_final_info": ended.copy()}


def register(env_id: str, goal_space: GoalSpace, **gym_kwargs) -> None:
    """Register ``env_id`` with gymnasium and record its goal space.

    Args:
        env_id: full id, ``"sun_lightning/<Name>-v0"``.
        goal_space: the environment's :class:`GoalSpace`.
        **gym_kwargs: forwarded to :func:`gymnasium.register` (``entry_point``,
            ``vector_entry_point``, ``max_episode_steps``, ``kwargs``...).
    """
    if not env_id.startswith(NAMESPACE + "/"):
        raise ValueError(f"env id {env_id!r} must live in the {NAMESPACE!r} namespace")
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, **gym_kwargs)
    record(env_id, goal_space)


def record(env_id: str, goal_space: GoalSpace) -> None:
    """Record the goal space of ``env_id`` (a package id, or a gymnasium id given a goal space in the config:
    :mod:`sun_lightning.envs.custom`)."""
    _GOAL_SPACES[env_id] = goal_space


def env_ids() -> list[str]:
    """All environment ids registered by the package."""
    return sorted(_GOAL_SPACES)


def goal_space(env_id: str) -> GoalSpace:
    """The :class:`GoalSpace` of a registered id; a clear error for an unknown one."""
    try:
        return _GOAL_SPACES[env_id]
    except KeyError:
        if env_id in gymnasium.registry and not env_id.startswith(NAMESPACE + "/"):
            raise ConfigError(no_goal_space(env_id)) from None
        raise ConfigError(unknown_environment(env_id, env_ids())) from None
