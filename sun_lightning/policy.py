"""Exploration policy of the collector: ε-greedy on the learner's goal-conditioned values (SPEC §1, §5a)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from sun_lightning import keys


class EpsilonGreedyPolicy(TensorDictModuleBase):
    """Greedy action towards the tensordict's goal, uniformly random with probability ε.

    Acts uniformly at random while ``warmup`` is set (the random warm-up of
    SPEC §5d), for envs in their random phase (episodic rules) and for rules
    without goals (Random).

    Args:
        learner: an :class:`~sun_lightning.module.SVFModule`.
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
            greedy = learner.act(
                tensordict[keys.OBS].to(device), tensordict[keys.GOAL].to(device), tensordict[keys.GOAL_ACTION].to(device)
            ).cpu()
        tensordict[keys.ACTION] = torch.where(explore, action, greedy)
        return tensordict
