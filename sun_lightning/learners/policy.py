"""Exploration policy of the collector: ε-greedy on the learner's goal-conditioned values (SPEC §1, §5a)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from sun_lightning import keys
from sun_lightning.learners.base import ActingPolicy


class EpsilonGreedyPolicy(ActingPolicy):
    """Greedy action towards the tensordict's goal, uniformly random with probability ε.

    Acts uniformly at random while ``warmup`` is set (the random warm-up of
    SPEC §5d), for envs in their random phase (episodic rules) and for rules
    without goals (Random).

    Args:
        learner: a discrete-action learner with ``action_values(obs, goal, goal_action)`` ``[B, |A|]``.
        num_actions: |A|.
        epsilon: probability of a uniformly random action.
        use_goals: False for rules that never act on goals.
    """

    in_keys = [keys.OBS, keys.GOAL, keys.GOAL_ACTION, keys.RANDOM_PHASE, keys.ACTION_VALUES]
    out_keys = [keys.ACTION]

    def __init__(self, learner, num_actions: int, epsilon: float = 0.1, use_goals: bool = True) -> None:
        super().__init__()
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self._refs = {"learner": learner}  # not a submodule: the learner is owned by Lightning
        self.num_actions, self.epsilon, self.use_goals = num_actions, epsilon, use_goals
        self.warmup = True

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        action = torch.randint(self.num_actions, batch)
        if self.warmup or not self.use_goals:
            tensordict[keys.ACTION] = action
            return tensordict
        explore = (torch.rand(batch) < self.epsilon).logical_or_(tensordict[keys.RANDOM_PHASE].reshape(batch))
        values = tensordict.get(keys.ACTION_VALUES, None)
        # (the whole-tensor test first: the transform evaluates every env on most steps)
        if values is not None and (not values.isnan().any() or not values.isnan().any(-1).reshape(batch)
                                   .logical_and_(~explore).any()):
            greedy = values.argmax(-1)  # the goal transform's evaluation of this state and goal
        else:
            learner = self._refs["learner"]
            device = learner.device
            greedy = learner.action_values(
                tensordict[keys.OBS].to(device), tensordict[keys.GOAL].to(device), tensordict[keys.GOAL_ACTION].to(device)
            ).argmax(-1).to(action.device)
        tensordict[keys.ACTION] = torch.where(explore, action, greedy)
        return tensordict


class GaussianNoisePolicy(ActingPolicy):
    """The actor's action towards the tensordict's goal plus N(0, σ²) noise, clipped to [−1, 1] (SPEC §5b).

    Acts uniformly in [−1, 1]^d while ``warmup`` is set (SPEC §5d), for envs in their random phase
    (episodic rules) and for rules without goals (Random).

    Args:
        learner: a continuous-action learner with ``act(obs, goal)`` ``[B, action_dim]`` (the actor).
        action_dim: d.
        noise_std: σ of the exploration noise (0.4 in the paper).
        use_goals: False for rules that never act on goals.
    """

    in_keys = [keys.OBS, keys.GOAL, keys.RANDOM_PHASE]
    out_keys = [keys.ACTION]

    def __init__(self, learner, action_dim: int, noise_std: float = 0.4, use_goals: bool = True) -> None:
        super().__init__()
        if noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {noise_std}")
        self._refs = {"learner": learner}  # not a submodule: the learner is owned by Lightning
        self.action_dim, self.noise_std, self.use_goals = action_dim, noise_std, use_goals
        self.warmup = True

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        uniform = torch.rand(*batch, self.action_dim) * 2 - 1
        if self.warmup or not self.use_goals:
            tensordict[keys.ACTION] = uniform
            return tensordict
        learner = self._refs["learner"]
        device = learner.device
        action = learner.act(tensordict[keys.OBS].to(device), tensordict[keys.GOAL].to(device)).to(uniform.device)
        action = (action + self.noise_std * torch.randn_like(action)).clamp_(-1.0, 1.0)
        random_phase = tensordict[keys.RANDOM_PHASE].reshape(*batch, 1)
        tensordict[keys.ACTION] = torch.where(random_phase, uniform, action)
        return tensordict
