"""Classic-control environments of the paper (SPEC §2, §4, §6).

Importing this module registers six gymnasium ids under ``sun_lightning/``,
each a thin wrapper around gymnasium's own environment:

- ``sun_lightning/MountainCar-v0``: MountainCar-v0, 3 actions, g_s = (x, ẋ), obs[0, 1].
- ``sun_lightning/Pendulum-v0``: Pendulum-v1 with 8 discrete torques,
  g_s = (cos θ, sin θ, θ̇), obs[0, 1, 2].
- ``sun_lightning/Acrobot-v0``: Acrobot-v1, 3 actions,
  g_s = (cos θ1, sin θ1, cos θ2, sin θ2), obs[0:4].
- ``sun_lightning/CartPole-v0``: CartPole-v1, 2 actions, g_s = (x, θ), obs[0, 2].
- ``sun_lightning/LunarLander-v0``: LunarLander-v3 (discrete), 4 actions,
  g_s = (x, y), obs[0, 1].
- ``sun_lightning/LunarLanderFull-v0``: LunarLander-v3 (discrete), 4 actions,
  g_s = the full 8-dim state.

Horizons are gymnasium's own (``max_episode_steps`` of the wrapped spec).
Rewards, ``terminated`` and ``truncated`` are passed through unchanged: SUN is
reward-free and the trainer ignores the reward, but keeping it costs nothing
and lets extrinsic returns be logged. Observations are float32.

Every id has a ``vector_entry_point`` that builds an in-process
:class:`gymnasium.vector.SyncVectorEnv` with ``SAME_STEP`` autoreset (or, on
request, ``DISABLED``: explicit partial resets, which the trainer uses),
because TorchRL's ``GymWrapper`` rejects gymnasium's default ``NEXT_STEP`` mode
and an in-process vector env avoids a subprocess per env (STACK.md)::

    venv = gymnasium.make_vec("sun_lightning/CartPole-v0", num_envs=4)
    env = torchrl.envs.GymWrapper(venv, categorical_action_encoding=True)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.envs.registration import load_env_creator

from sun_lightning.envs.eval_goals import EvalGoals, grid_points, linspace_axes, register_eval_goals, with_actions
from sun_lightning.envs.registry import (
    NAMESPACE,
    GoalSpace,
    register,
    torchrl_autoreset_mode,
)

__all__ = [
    "CLASSIC_IDS",
    "PENDULUM_TORQUES",
    "DiscreteTorque",
    "make_env",
    "make_vector_env",
]

#: Pendulum's torque range [−2, 2] discretized evenly into 8 actions (SPEC §6).
#: The endpoints are included, so actions 0 and 7 are the full ±2 torques.
PENDULUM_TORQUES: np.ndarray = np.linspace(-2.0, 2.0, 8, dtype=np.float32)


class DiscreteTorque(gymnasium.ActionWrapper):
    """Maps a ``Discrete(len(torques))`` action to a 1-dim continuous torque.

    SPEC §6 runs Pendulum with the DQN variant of SVF learning (§5a), which
    needs a finite action set; action ``i`` applies torque ``torques[i]``.

    Args:
        env: a Pendulum-like env with a ``Box`` action space of shape ``(1,)``.
        torques: the torque of each discrete action.
    """

    def __init__(self, env: gymnasium.Env, torques: np.ndarray = PENDULUM_TORQUES):
        super().__init__(env)
        self.torques = np.asarray(torques, dtype=env.action_space.dtype)
        self.action_space = gymnasium.spaces.Discrete(len(self.torques))

    def action(self, action: Any) -> np.ndarray:
        # A fresh (1,) array per step: the wrapped env must not alias our table.
        return self.torques[int(action)].reshape(1).copy()


class _Float32Obs(gymnasium.ObservationWrapper):
    """Casts observations to float32 (only installed where the base env differs)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gymnasium.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


def make_env(base_id: str, discrete_torques: bool = False, **kwargs: Any) -> gymnasium.Env:
    """Single-env entry point of the classic-control ids (SPEC §6).

    Instantiates gymnasium's environment class for ``base_id`` directly rather
    than through :func:`gymnasium.make`, so the base spec's ``TimeLimit`` and
    checker wrappers are not stacked under the ones that ``gymnasium.make``
    adds for our own id (our spec carries the same ``max_episode_steps``).

    Args:
        base_id: the wrapped gymnasium id, e.g. ``"MountainCar-v0"``.
        discrete_torques: wrap with :class:`DiscreteTorque` (Pendulum).
        **kwargs: forwarded to the environment class (``render_mode``, ...),
            on top of the base spec's own kwargs.

    Returns:
        The environment, with float32 observations.
    """
    spec = gymnasium.spec(base_id)
    env = load_env_creator(spec.entry_point)(**{**spec.kwargs, **kwargs})
    if env.observation_space.dtype != np.float32:
        env = _Float32Obs(env)
    if discrete_torques:
        env = DiscreteTorque(env)
    return env


def make_vector_env(
    num_envs: int = 1,
    max_episode_steps: int | None = None,
    autoreset_mode: gymnasium.vector.AutoresetMode | str = gymnasium.vector.AutoresetMode.SAME_STEP,
    **kwargs: Any,
) -> gymnasium.vector.SyncVectorEnv:
    """Vector entry point: an in-process ``SyncVectorEnv``, SAME_STEP autoreset by default.

    :func:`gymnasium.make_vec` calls it as
    ``make_vector_env(num_envs=..., max_episode_steps=..., **spec_kwargs, **user_kwargs)``.
    TorchRL's ``GymWrapper`` takes two modes (STACK.md): ``SAME_STEP``, where the
    step that ends an episode returns the reset observation and puts the final
    one in ``info["final_obs"]``, and ``DISABLED``, where that step returns the
    final observation and the wrapper resets the sub-env itself
    (``reset(options={"reset_mask": mask})``), with no terminal-observation
    reader on every step: the trainer's choice.

    Args:
        num_envs: number of sub-environments.
        max_episode_steps: horizon of each sub-env (gymnasium's, SPEC §6);
            ``None`` for no time limit.
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an ``AutoresetMode`` or its value).
        **kwargs: forwarded to :func:`make_env` (``base_id``, ``render_mode``...).

    Returns:
        The vector environment.
    """
    mode = torchrl_autoreset_mode(autoreset_mode)

    def make_one() -> gymnasium.Env:
        env = make_env(**kwargs)
        if max_episode_steps is not None:
            env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
        return env

    return gymnasium.vector.SyncVectorEnv(
        [make_one for _ in range(num_envs)],
        autoreset_mode=mode,
    )


_INF = float("inf")
_CARTPOLE_THETA = 12 * 2 * math.pi / 360  # CartPole's own failure angle, 12° in radians

# LunarLanderFull (SPEC §6: "metric: k-NN entropy"). Goal bounds: x ∈ [−1, 1]
# (the episode ends when |x| ≥ 1) and y ∈ [−0.59, ∞) as for LunarLander; the
# other six dimensions use gymnasium's declared observation bounds (velocities
# ±10, angle ±2π, angular velocity ±10, leg contacts {0, 1}). Metric bounds,
# which set the min–max normalization of the k-NN entropy (SPEC §7), are the
# same except y ∈ [−0.25, 10], LunarLander's metric range for the height.
_LLF_LOW = (-1.0, -0.59, -10.0, -10.0, -2 * math.pi, -10.0, 0.0, 0.0)
_LLF_HIGH = (1.0, _INF, 10.0, 10.0, 2 * math.pi, 10.0, 1.0, 1.0)
_LLF_METRIC_LOW = (-1.0, -0.25, -10.0, -10.0, -2 * math.pi, -10.0, 0.0, 0.0)
_LLF_METRIC_HIGH = (1.0, 10.0, 10.0, 10.0, 2 * math.pi, 10.0, 1.0, 1.0)

# name -> (base id, GoalSpace, extra entry-point kwargs). Classic control uses
# the "radius" reach rule with ρ = 0.1 in standardized goal space (SPEC §2, §4).
_CLASSIC: dict[str, tuple[str, GoalSpace, dict[str, Any]]] = {
    "MountainCar-v0": (
        "MountainCar-v0",
        GoalSpace(obs_dim=2, num_actions=3, goal_dims=(0, 1),
                  low=(-1.2, -0.07), high=(0.6, 0.07), rho=0.1, reach="radius"),
        {},
    ),
    "Pendulum-v0": (
        "Pendulum-v1",
        GoalSpace(obs_dim=3, num_actions=len(PENDULUM_TORQUES), goal_dims=(0, 1, 2),
                  low=(-1.0, -1.0, -8.0), high=(1.0, 1.0, 8.0), rho=0.1, reach="radius"),
        {"discrete_torques": True},
    ),
    "Acrobot-v0": (
        "Acrobot-v1",
        GoalSpace(obs_dim=6, num_actions=3, goal_dims=(0, 1, 2, 3),
                  low=(-1.0,) * 4, high=(1.0,) * 4, rho=0.1, reach="radius"),
        {},
    ),
    "CartPole-v0": (
        "CartPole-v1",
        GoalSpace(obs_dim=4, num_actions=2, goal_dims=(0, 2),
                  low=(-2.4, -_CARTPOLE_THETA), high=(2.4, _CARTPOLE_THETA),
                  rho=0.1, reach="radius"),
        {},
    ),
    "LunarLander-v0": (
        "LunarLander-v3",
        GoalSpace(obs_dim=8, num_actions=4, goal_dims=(0, 1),
                  low=(-1.0, -0.59), high=(1.0, _INF),
                  metric_low=(-1.0, -0.25), metric_high=(1.0, 10.0),
                  rho=0.1, reach="radius"),
        {},
    ),
    "LunarLanderFull-v0": (
        "LunarLander-v3",
        GoalSpace(obs_dim=8, num_actions=4, goal_dims=None,
                  low=_LLF_LOW, high=_LLF_HIGH,
                  metric_low=_LLF_METRIC_LOW, metric_high=_LLF_METRIC_HIGH,
                  rho=0.1, reach="radius"),
        {},
    ),
}

def _angles(count: int) -> list[float]:
    return [2 * math.pi * k / count for k in range(count)]


def _lander_xy(full: bool) -> torch.Tensor:
    # x within the episode's bounds, y from the pad to about the start height; the full state at rest, level.
    xy = grid_points(linspace_axes((-0.8, 0.0), (0.8, 1.4), (5, 4)))
    return torch.cat([xy, torch.zeros(len(xy), 6)], 1) if full else xy


#: name -> the goal projections of its evaluation goals: a grid over the goal bounds (angles for the
#: angle features, so that every goal is a state the pendulum or acrobot has), each paired with every goal action.
_EVAL_GRIDS: dict[str, Any] = {
    "MountainCar-v0": lambda: grid_points(linspace_axes((-1.2, -0.07), (0.6, 0.07), (5, 5))),
    "Pendulum-v0": lambda: torch.tensor([(math.cos(a), math.sin(a), v) for a in _angles(6) for v in (-4.0, 0.0, 4.0)],
                                        dtype=torch.float32),
    "Acrobot-v0": lambda: torch.tensor([(math.cos(a), math.sin(a), math.cos(b), math.sin(b))
                                        for a in _angles(4) for b in _angles(4)], dtype=torch.float32),
    "CartPole-v0": lambda: grid_points(linspace_axes((-2.4, -_CARTPOLE_THETA), (2.4, _CARTPOLE_THETA), (5, 3))),
    "LunarLander-v0": lambda: _lander_xy(full=False),
    "LunarLanderFull-v0": lambda: _lander_xy(full=True),
}


def eval_goals(name: str) -> EvalGoals:
    """The evaluation goals of classic-control env ``name`` (a key of ``_CLASSIC``): :data:`_EVAL_GRIDS` × actions."""
    return with_actions(_EVAL_GRIDS[name](), _CLASSIC[name][1].num_actions)


#: The registered ids, ``"sun_lightning/<Name>-v0"``.
CLASSIC_IDS: tuple[str, ...] = tuple(f"{NAMESPACE}/{name}" for name in _CLASSIC)


def _register_all() -> None:
    for name, (base_id, space, extra) in _CLASSIC.items():
        register(
            f"{NAMESPACE}/{name}",
            space,
            # String entry points (not closures) keep the specs picklable and
            # JSON-serializable, so async vector envs and spec.to_json work.
            entry_point=f"{__name__}:make_env",
            vector_entry_point=f"{__name__}:make_vector_env",
            max_episode_steps=gymnasium.spec(base_id).max_episode_steps,
            kwargs={"base_id": base_id, **extra},
        )
        register_eval_goals(f"{NAMESPACE}/{name}", functools.partial(eval_goals, name))


_register_all()
