"""Goal-reaching evaluation: can the goal-conditioned policy reach goals at all?

As JaxGCRL and DISCOVER report it: from the environment's start states, the deterministic policy (the
actor without noise for the TD3 variant, greedy on Q for the DQN variant; no goal reselection) pursues
each goal of a fixed set (:mod:`sun_lightning.envs.eval_goals`) for one episode horizon, every goal in
its own sub-environment of one vector env built for the evaluation alone. Reaching a goal ends its
pursuit (reaching is terminal, as in the SVF's definition, SPEC §1); so does the end of its episode
(termination or the horizon). Reaching follows the environment's reach rule (SPEC §2,
:func:`~sun_lightning.envs.reach.goal_reached`): for continuous actions a state within η of the goal
(the start state included), for discrete actions taking the goal action in a state matching the goal.

Per goal the evaluation records whether it was reached, the env steps that took, and the final
distance: between the goal and the goal projection of the state where its pursuit ended (Euclidean in
goal units; tiles on gridworlds, in row/column units). The training envs, D, the pseudocounts and the
random streams are not touched (the caller restores the global RNG states: :class:`sun_lightning.callbacks.evaluation.GoalEvaluation`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
import torch

from sun_lightning.envs.eval_goals import EvalGoals
from sun_lightning.envs.reach import goal_reached
from sun_lightning.envs.registry import GoalSpace, goal_space

#: ``act(obs [N, obs_dim], goal [N, goal_dim], goal_action [N] or None) -> actions`` (``[N]`` long or ``[N, d]``).
ActFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]

SUCCESS, FINAL_DISTANCE, STEPS_TO_GOAL = "eval/success", "eval/final_distance", "eval/steps_to_goal"


@dataclass
class EvalResult:
    """Per-goal outcome of one evaluation.

    Attributes:
        goals: the goals pursued.
        reached: ``[N]`` bool.
        steps: ``[N]`` env steps until the goal was reached (the horizon where it was not).
        final_distance: ``[N]`` distance from the goal where its pursuit ended.
    """

    goals: EvalGoals
    reached: torch.Tensor
    steps: torch.Tensor
    final_distance: torch.Tensor

    def metrics(self) -> dict[str, float]:
        """``eval/success`` (fraction of goals reached), ``eval/final_distance`` (mean over goals) and
        ``eval/steps_to_goal`` (mean over the reached goals; 0 when none was reached, as ``explore/goals/steps_to_goal``)."""
        hits = int(self.reached.sum())
        return {SUCCESS: hits / max(len(self.reached), 1),
                FINAL_DISTANCE: float(self.final_distance.double().mean()),
                STEPS_TO_GOAL: float(self.steps[self.reached].double().sum()) / hits if hits else 0.0}


class GoalEvaluator:
    """Pursues a fixed goal set in a vector env of its own, one sub-environment per goal.

    Args:
        env_id: the environment (its goal space is recorded under this id).
        goals: the goals (``eval_goals(env_id)``, or a subset).
        seed: seed of the evaluation env's start states, the same at every evaluation.
        make_vec: builds ``n`` sub-environments with SAME_STEP autoreset (an environment from outside the
            package: its :class:`~sun_lightning.envs.custom.CustomEnv`); ``None``: ``gymnasium.make_vec(env_id)``.
        horizon: the episode horizon; ``None``: the registered ``max_episode_steps`` of ``env_id``.
    """

    def __init__(self, env_id: str, goals: EvalGoals, seed: int = 0,
                 make_vec: Callable[[int], Any] | None = None, horizon: int | None = None) -> None:
        self.env_id, self.goals, self.seed = env_id, goals, seed
        self.space: GoalSpace = goal_space(env_id)
        self.horizon = horizon if horizon is not None else gymnasium.spec(env_id).max_episode_steps
        if not self.horizon:
            raise ValueError(f"the goal-reaching evaluation needs an episode horizon: {env_id} has no max_episode_steps")
        self._make_vec = make_vec
        self._env = None

    def env(self):
        """The evaluation's vector env (SAME_STEP autoreset), built on first use."""
        if self._env is None:
            n = len(self.goals)
            self._env = self._make_vec(n) if self._make_vec is not None else \
                gymnasium.make_vec(self.env_id, num_envs=n, vectorization_mode="vector_entry_point")
        return self._env

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def run(self, act: ActFn, scale: torch.Tensor | None = None) -> EvalResult:
        """One evaluation: every goal pursued by ``act`` from a start state for one horizon.

        Args:
            act: the deterministic policy.
            scale: the standardization σ̃ of the ``"radius"`` reach rule (the run's pseudocount's; SPEC §4).
        """
        space, goals = self.space, self.goals
        goal, goal_action = goals.goal, goals.goal_action
        if space.reach == "radius" and scale is None:
            scale = torch.ones(space.goal_dim)
        vec = self.env()
        obs, _ = vec.reset(seed=self.seed)
        obs = _tensor(obs)
        n = len(goals)
        active = torch.ones(n, dtype=torch.bool)
        reached = torch.zeros(n, dtype=torch.bool)
        steps = torch.full((n,), self.horizon, dtype=torch.long)
        end_obs = obs.clone()

        def hit(state: torch.Tensor, action: torch.Tensor | None, t: int) -> None:
            # the goals reached in `state` (by `action`), among the active ones, end here after t steps
            now = active & goal_reached(space, space.project(state), action, goal, goal_action, scale)
            reached[now], steps[now] = True, t
            end_obs[now] = state[now]
            active[now] = False

        if not space.discrete:
            hit(obs, None, 0)
        for t in range(self.horizon):
            if not active.any():
                break
            action = act(obs, goal, goal_action).cpu()
            if space.discrete:
                action = action.long()
                hit(obs, action, t + 1)
                actions = action.numpy()
            else:
                action = action.float().clamp(-1.0, 1.0)
                actions = action.numpy()
            next_obs, _, terminated, truncated, info = vec.step(actions)
            last = _tensor(next_obs)
            ended = torch.as_tensor(np.asarray(terminated) | np.asarray(truncated))
            if ended.any() and "final_obs" in info:  # SAME_STEP: the ended ones' last states are in the info
                rows = ended.nonzero().squeeze(1)
                last[rows] = _tensor(np.stack([info["final_obs"][int(i)] for i in rows]))
            if not space.discrete:
                hit(last, None, t + 1)
            end_obs[active] = last[active]
            active &= ~ended
            obs = _tensor(next_obs)
        return EvalResult(goals, reached, steps, self.distance(end_obs))

    def distance(self, obs: torch.Tensor) -> torch.Tensor:
        """``[N]`` distance between each goal and the goal projection of ``obs`` ``[N, obs_dim]``."""
        achieved = self.space.project(obs)
        if self.space.exact_counts and self.space.grid_shape is not None:
            cols = self.space.grid_shape[1]
            here, there = self.space.tile(achieved), self.space.tile(self.goals.goal)
            rows = torch.stack([torch.div(here, cols, rounding_mode="floor"), here % cols], 1)
            want = torch.stack([torch.div(there, cols, rounding_mode="floor"), there % cols], 1)
            return (rows - want).double().norm(dim=1).float()
        return (achieved - self.goals.goal).norm(dim=1)


def _tensor(obs) -> torch.Tensor:
    return torch.as_tensor(np.asarray(obs, dtype=np.float32)).clone()


def policy_of(learner, space: GoalSpace, uses_goals: bool, seed: int = 0) -> ActFn:
    """The deterministic policy a run evaluates: greedy on Q (discrete actions: the learner's ``action_values``,
    min over an ensemble's critics), the actor's action (continuous: the learner's ``act``), no noise.

    A rule without goals (Random) pursues none: it acts uniformly at random, from a generator of its own
    seeded with ``seed``, so that its evaluation is the random baseline's.
    """
    device = learner.device
    if not uses_goals:
        generator = torch.Generator().manual_seed(seed)

        def random_act(obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
            if space.discrete:
                return torch.randint(space.num_actions, (len(obs),), generator=generator)
            return torch.rand(len(obs), space.action_dim, generator=generator) * 2 - 1

        return random_act
    if space.discrete:
        def greedy(obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
            return learner.action_values(obs.to(device), goal.to(device), goal_action.to(device)).argmax(-1)

        return greedy

    def actor(obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        return learner.act(obs.to(device), goal.to(device))

    return actor
