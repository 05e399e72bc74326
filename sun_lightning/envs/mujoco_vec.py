"""Batched MuJoCo vector environments: many worlds of one model stepped in one threaded call (SPEC §6).

:class:`MujocoVectorEnv` is the machinery the MuJoCo environments of SPEC §6 (the ant mazes, the arm
pushing a cube) share. All ``num_envs`` worlds live in one :class:`mujoco.batch.Batch`: a world is one
row of the batch's state table (its ``mjSTATE_INTEGRATION`` vector), and one :meth:`~MujocoVectorEnv.step`
writes the controls of every world and advances them all by ``frame_skip`` ``mj_step`` calls in a single
call that runs on ``num_threads`` threads with the GIL released. The batch's results are bit-identical to a
loop over one ``MjData`` per world, so the environment is plain MuJoCo, only faster.

An environment supplies three things, as a subclass:

* the compiled model, passed to the constructor with the spaces, horizon and frame skip;
* the reset distribution, :meth:`~MujocoVectorEnv.sample_state`: the state fields (``qpos``, ``qvel``, ...)
  of ``n`` fresh worlds drawn from a numpy generator;
* the observation, :meth:`~MujocoVectorEnv.observe` (by default ``qpos`` then ``qvel`` as float32); an
  observation that reads derived fields (site or body positions) names them in ``outputs``, so that the
  batch copies them out from the first call on, and sets ``observe_stage``, so that the batch computes
  them at the new state rather than one substep behind;

and may supply :meth:`~MujocoVectorEnv.invalid`, a per-world test of the state after a step. A world that
fails it, or whose step tripped MuJoCo's divergence check (a bad or huge ``qpos``, ``qvel`` or ``qacc``,
on which MuJoCo resets that world to the model's default pose behind the environment's back), gets its
state from before the step back, with its velocities zeroed: an exact restore can freeze a body in free
flight for good, since the same state fails again whatever the action
(:attr:`MujocoVectorEnv.zero_velocity_on_restore` turns the zeroing off). ``restored`` marks the worlds
undone by the last step; ``num_restores`` and ``num_diverged`` count them.

The rest follows :class:`~sun_lightning.envs.point_maze.PointMazeVectorEnv`: rewards are 0 and episodes are
only truncated, at the horizon; autoreset mode ``SAME_STEP`` (the default: ended worlds come back reset,
their last observation in ``info["final_obs"]``) or ``DISABLED`` (what the trainer uses: ended worlds refuse
to step until ``reset(options={"reset_mask": mask})``); one numpy generator, reseeded by a ``seed`` given to
:meth:`~MujocoVectorEnv.reset`, draws the starts of all worlds at every (partial) reset and the masked ones
keep theirs, so both modes draw alike; actions of the wrong shape, non-finite or out of bounds raise a
one-line ``ValueError``. :class:`MujocoSingleEnv` is the one-world :class:`gymnasium.Env` over a vector env
of one world, for :func:`gymnasium.make`.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium
import mujoco
import mujoco.batch
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sun_lightning.envs.registry import end_step, refuse_ended, reset_mask, torchrl_autoreset_mode

ACTION_TOL = 1e-6  # actions this far outside their bounds are rounding noise and clipped, beyond it an error
NO_HORIZON = 2**62  # the horizon of a single env's inner vector env: gymnasium's TimeLimit truncates instead
# Warnings of MuJoCo's divergence check, which resets the offending world to the model's defaults; adjacent
# in mjtWarning, so a slice of the counters views them.
_DIVERGENCE_WARNINGS = slice(int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQACC) + 1)
assert _DIVERGENCE_WARNINGS.stop - _DIVERGENCE_WARNINGS.start == 3
_WARNING_COUNT = 1  # column of the warning counters holding the number of warnings


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks on this OS
        return os.cpu_count() or 1


def check_actions(actions: Any, shape: tuple[int, ...], low: np.ndarray, high: np.ndarray, name: str) -> np.ndarray:
    """``actions`` as float64 clipped into ``[low, high]``, if of ``shape``, finite and within the bounds ± ACTION_TOL.

    Args:
        actions: array-like of ``shape``.
        shape: the expected shape.
        low, high: bounds broadcastable to ``shape``.
        name: environment name, to prefix the messages.

    Raises:
        ValueError: naming the wrong shape, or the first non-finite or out-of-bounds value and its index.
    """
    a = np.asarray(actions)
    if a.shape != shape:
        raise ValueError(f"{name}: actions must have shape {shape}, got {a.shape}")
    try:
        a = a.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: actions must be real numbers, got dtype {a.dtype}") from None
    clipped = np.clip(a, low, high)
    if not np.abs(clipped - a).max() <= ACTION_TOL:  # NaN fails this test too
        bad, what = ~np.isfinite(a), "be finite"
        if not bad.any():
            bad = np.abs(clipped - a) > ACTION_TOL
            lo, hi = np.broadcast_to(low, shape)[bad][0], np.broadcast_to(high, shape)[bad][0]
            what = f"lie in [{lo:g}, {hi:g}]"
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: actions must {what}, got {a[index]:g} at index {index}")
    return clipped


class MujocoVectorEnv(VectorEnv):
    """``num_envs`` worlds of one MuJoCo model, stepped together by a :class:`mujoco.batch.Batch` (SPEC §6).

    Subclasses supply the model and spaces (constructor), :meth:`sample_state` and optionally
    :meth:`observe` and :meth:`invalid`; see the module docstring. The live ``[num_envs, ...]`` views
    :attr:`qpos`, :attr:`qvel`, :attr:`ctrl` are the worlds' state rows: a write is the world's state at
    its next step.

    Args:
        model: the compiled model; the batch keeps its own copy.
        name: environment name, to prefix error messages.
        single_observation_space: one world's observation space (float32 Box).
        single_action_space: one world's action space (Box of ``model.nu`` controls).
        horizon: default episode length, used when ``max_episode_steps`` is ``None``.
        frame_skip: ``mj_step`` calls per env step.
        num_envs: number of worlds.
        max_episode_steps: episode length (truncation); ``None`` for ``horizon``.
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an ``AutoresetMode`` or its value).
        num_threads: threads of the batch's calls, the caller's included; ``None`` for
            ``min(num_envs, available CPUs)``.
        outputs: derived ``MjData`` fields (``"site_xpos"``, ...) that :meth:`observe` or :meth:`invalid`
            read through ``self.batch.bind``: bound here, since the batch copies out only the fields bound
            before a call.
        observe_stage: an ``mjtStage``, the forward stages computed at the new state after every step and
            reset, for observations that read derived fields; ``mjSTAGE_NONE`` when they read state only.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    zero_velocity_on_restore: bool = True

    def __init__(self, model: mujoco.MjModel, *, name: str, single_observation_space: spaces.Box,
                 single_action_space: spaces.Box, horizon: int, frame_skip: int, num_envs: int = 1,
                 max_episode_steps: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
                 num_threads: int | None = None, outputs: tuple[str, ...] = (),
                 observe_stage: mujoco.mjtStage = mujoco.mjtStage.mjSTAGE_NONE) -> None:
        mode = torchrl_autoreset_mode(autoreset_mode)
        if num_envs < 1:
            raise ValueError(f"{name}: num_envs must be at least 1, got {num_envs}")
        if single_action_space.shape != (model.nu,):
            raise ValueError(f"{name}: the action space {single_action_space.shape} must hold the model's "
                             f"{model.nu} controls")
        self.autoreset_mode = mode  # TorchRL's GymWrapper reads this attribute, not metadata
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.name, self.model, self.num_envs, self.frame_skip = name, model, num_envs, frame_skip
        self.horizon = horizon if max_episode_steps is None else max_episode_steps
        self.num_threads = min(num_envs, available_cpus()) if num_threads is None else num_threads
        if self.num_threads < 1:
            raise ValueError(f"{name}: num_threads must be at least 1, got {self.num_threads}")
        self.observe_stage = int(observe_stage)
        self.single_observation_space, self.single_action_space = single_observation_space, single_action_space
        self.observation_space = batch_space(single_observation_space, num_envs)
        self.action_space = batch_space(single_action_space, num_envs)
        self._action_low = single_action_space.low.astype(np.float64)
        self._action_high = single_action_space.high.astype(np.float64)

        self.batch = mujoco.batch.Batch(model, num_envs, self.num_threads)
        self.qpos, self.qvel, self.ctrl = (self.batch.bind(f) for f in ("qpos", "qvel", "ctrl"))
        for field in outputs:
            self.batch.bind(field)
        # A live view of the divergence warnings' counters (batch.warning keeps the other warnings' counts).
        self._divergence = self.batch.warning[:, _DIVERGENCE_WARNINGS, _WARNING_COUNT]
        self.rng = np.random.default_rng()
        self.restored = np.zeros(num_envs, dtype=bool)  # the worlds whose last step was undone
        self.num_restores = 0  # world-steps undone, for either reason
        self.num_diverged = 0  # world-steps undone because they tripped MuJoCo's divergence check
        self._started = False
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._ended = np.zeros(num_envs, dtype=bool)  # DISABLED mode: episodes over, awaiting their reset

    # --- what an environment supplies ------------------------------------------------------------

    def sample_state(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """Start states of ``n`` worlds: state field name (``"qpos"``, ``"qvel"``, ...) -> ``[n, ...]`` array.

        Fields left out keep the model's defaults (``mj_resetData``).
        """
        raise NotImplementedError

    def observe(self) -> np.ndarray:
        """The ``[num_envs, obs_dim]`` float32 observations of the current states (a new array)."""
        return np.concatenate([self.qpos, self.qvel], axis=1, dtype=np.float32)

    def invalid(self) -> np.ndarray | None:
        """``[num_envs]`` bool, the worlds whose state after a step is to be undone; ``None`` for none."""
        return None

    # --- gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Reset every world, or only those of ``options["reset_mask"]`` (``[num_envs]`` bool).

        Returns the observations of all worlds (the others' unchanged). A ``seed`` reseeds the one
        generator of all worlds, with a mask too.
        """
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        mask = reset_mask(options, self.num_envs)
        if mask is None or not self._started:
            mask = np.ones(self.num_envs, dtype=bool)
        self._restart(mask)
        self._started = True
        return self.observe(), {}

    def _restart(self, mask: np.ndarray) -> None:
        # Draw for every world, keep the masked draws: a world's start does not depend on which others reset.
        starts = self.sample_state(self.rng, self.num_envs)
        if not mask.any():
            return
        self.batch.reset(mask, stage=mujoco.mjtStage.mjSTAGE_NONE)
        for field, values in starts.items():
            self.batch.bind(field)[mask] = values[mask]
        if self.observe_stage != mujoco.mjtStage.mjSTAGE_NONE:
            self.batch.forward(mask, stage=self.observe_stage)
        self._elapsed[mask] = 0
        self._ended[mask] = False

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        refuse_ended(self._ended)
        self.ctrl[:] = check_actions(actions, (self.num_envs, self.model.nu), self._action_low, self._action_high,
                                     self.name)
        saved = self.batch.state.copy()
        # Zeroed before every step: MuJoCo's automatic reset clears the counters, so a rise would miss repeats.
        self._divergence[...] = 0
        self.batch.step(nstep=self.frame_skip, stage=self.observe_stage)
        diverged = self._divergence.any(axis=1)
        self.num_diverged += int(diverged.sum())
        self._undo(diverged, saved)
        bad = self.invalid()
        if bad is not None:
            self._undo(bad & ~diverged, saved, add=True)
        self._elapsed += 1
        truncated = self._elapsed >= self.horizon
        terminated = np.zeros(self.num_envs, dtype=bool)
        obs = self.observe()
        obs, infos = end_step(self, obs, truncated, self.observe)
        return obs, np.zeros(self.num_envs), terminated, truncated, infos

    def _undo(self, mask: np.ndarray, saved: np.ndarray, add: bool = False) -> None:
        """Give the worlds of ``mask`` their state rows ``saved`` before the step (velocities zeroed)."""
        self.restored = (self.restored | mask) if add else mask.copy()
        if not mask.any():
            return
        self.num_restores += int(mask.sum())
        self.batch.state[mask] = saved[mask]
        if self.zero_velocity_on_restore:
            self.qvel[mask] = 0.0
        if self.observe_stage != mujoco.mjtStage.mjSTAGE_NONE:
            self.batch.forward(mask, stage=self.observe_stage)

    def close_extras(self, **kwargs: Any) -> None:
        # Frees the batch's threads and memory.
        self.batch = self.qpos = self.qvel = self.ctrl = self._divergence = None


class MujocoSingleEnv(gymnasium.Env):
    """One world as a :class:`gymnasium.Env`, over a :class:`MujocoVectorEnv` of one world.

    The inner env never truncates (gymnasium's ``TimeLimit`` from :func:`gymnasium.make` does) and steps
    on the caller's thread; seeded alike, it draws the same starts as a vector env of one world.

    Args:
        vector_env: a vector env with ``num_envs == 1``, ``autoreset_mode`` ``DISABLED`` and horizon
            :data:`NO_HORIZON`.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, vector_env: MujocoVectorEnv) -> None:
        if vector_env.num_envs != 1:
            raise ValueError(f"a single env needs a vector env of one world, got {vector_env.num_envs}")
        self.vector_env = vector_env
        self.observation_space = vector_env.single_observation_space
        self.action_space = vector_env.single_action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        obs, _ = self.vector_env.reset(seed=seed)
        return obs[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action)
        if a.shape != self.action_space.shape:  # the vector env would name the batched shape
            name = self.vector_env.name
            raise ValueError(f"{name}: actions must have shape {self.action_space.shape}, got {a.shape}")
        obs, _, _, _, _ = self.vector_env.step(a[None])
        return obs[0], 0.0, False, False, {}

    def close(self) -> None:
        self.vector_env.close()
