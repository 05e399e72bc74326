"""Goal selection as a TorchRL transform on the collector's environment (SPEC §1, §3; Algorithm 1).

The transform keeps, for every env of the batch, its goal, the goal's value at
selection time and the selection bookkeeping. After each step it decides
whether the goal was reached and whether to re-select, scores a fresh
candidate batch from the replay storage with the configured
:class:`~sun_lightning.goals.base.GoalSelector`, and writes the goal for the
next step into the tensordict, where the policy reads it.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs.transforms import Transform

from sun_lightning import keys
from sun_lightning.envs.reach import goal_reached
from sun_lightning.goals.base import GoalSelector, GoalValues
from sun_lightning.replay.counted import CountedReplay

_FLAGS = (keys.GOAL_SELECTED, keys.GOAL_RESELECTED, keys.GOAL_REACHED, keys.RANDOM_PHASE)


#: The per-env tensors of the goal being pursued (checkpointed with the flags).
_STATE = ("goal", "goal_action", "goal_index", "value_at_selection", "goal_steps", "has_goal")


class GoalSelectionTransform(Transform):
    """Selects, keeps and re-selects each env's goal.

    Keys written (root after reset, ``"next"`` after a step): ``goal`` and
    ``goal_action`` (the goal pursued from that state), ``goal_selected`` (a
    new goal was drawn for that state), ``goal_reselected`` (drawn other than
    at an episode start), ``goal_reached`` (the step that led here reached the
    previous goal), ``goal_steps`` (steps spent on the goal when it was
    reached), ``random_phase`` (acting uniformly until the episode ends), and
    for discrete actions ``action_values``: Q(s, ·, g) of that state and goal
    where the rule evaluated it this step (the adaptive check, or the scoring of
    the chosen candidate), NaN elsewhere. The policy acts on these instead of
    evaluating the network again, so that, as in Algorithm 1, the goal check,
    the selection and the action of a step read the same network.

    Args:
        selector: the selection rule.
        replay: the replay storage the candidates come from, with the counts of its entries (SPEC §4).
        learner: what selection reads of the learner (:class:`~sun_lightning.goals.base.GoalValues`).
        num_envs: B.
        horizon: the env's episode horizon, for rules that scale by it (``None``: none).
    """

    def __init__(self, selector: GoalSelector, replay: CountedReplay, learner: GoalValues, num_envs: int,
                 horizon: int | None = None) -> None:
        super().__init__()
        self.selector = selector
        self.replay = replay
        self.storage = replay.storage
        self.space = replay.storage.space
        # A plain attribute holder keeps the learner out of this module's
        # state dict and away from TorchRL's device casting.
        self._refs = {"learner": learner}
        self.active = False
        b, g = num_envs, self.space.goal_dim
        self.goal = torch.zeros(b, g)
        self.goal_action = torch.zeros(b, dtype=torch.long)
        self.goal_index = torch.zeros(b, dtype=torch.long)  # storage entry the goal came from
        self.value_at_selection = torch.zeros(b)
        self.goal_steps = torch.zeros(b, dtype=torch.long)
        self.has_goal = torch.zeros(b, dtype=torch.bool)
        self.flags = {name: torch.zeros(b, dtype=torch.bool) for name in _FLAGS}
        # Q(s, ·, g) of each env's current state and goal where evaluated this step (NaN: not evaluated).
        self.action_values = torch.full((b, self.space.num_actions), torch.nan) if self.space.discrete else None
        selector.bind(learner, num_envs, horizon)

    @property
    def learner(self):
        return self._refs["learner"]

    # ---- checkpoints ----------------------------------------------------------------------
    def exploration_state(self) -> dict:
        """Each env's goal and its selection-time bookkeeping, for an exact resume."""
        state = {name: getattr(self, name).clone() for name in _STATE}
        state["flags"] = {name: flag.clone() for name, flag in self.flags.items()}
        state["action_values"] = None if self.action_values is None else self.action_values.clone()
        state["active"] = self.active
        state["selector"] = self.selector.state_dict()
        return state

    def load_exploration_state(self, state: dict) -> None:
        for name in _STATE:
            getattr(self, name).copy_(state[name])
        for name, flag in state["flags"].items():
            self.flags[name] = flag.clone()
        if self.action_values is not None:
            self.action_values.copy_(state["action_values"])
        self.active = state["active"]
        if "selector" in state:  # checkpoints written before rules kept state of their own have none
            self.selector.load_state_dict(state["selector"])

    # ---- specs --------------------------------------------------------------------------
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        shape = observation_spec.shape
        observation_spec[keys.GOAL] = Unbounded((*shape, self.space.goal_dim), dtype=torch.float32)
        observation_spec[keys.GOAL_ACTION] = Categorical(max(self.space.num_actions, 1), shape, dtype=torch.long)
        observation_spec[keys.GOAL_STEPS] = Bounded(0, 2**31 - 1, shape, dtype=torch.long)
        for name in _FLAGS:
            observation_spec[name] = Categorical(2, shape, dtype=torch.bool)
        if self.action_values is not None:
            observation_spec[keys.ACTION_VALUES] = Unbounded((*shape, self.space.num_actions), dtype=torch.float32)
        return observation_spec

    # ---- TorchRL hooks --------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        mask = self._reset_mask(tensordict, tensordict_reset)
        self.has_goal[mask] = False
        if self.action_values is not None:
            self.action_values[mask] = torch.nan
        for name in _FLAGS:
            self.flags[name][mask] = False
        self.goal_steps[mask] = 0
        if self.active and self.selector.uses_goals:
            self._select(tensordict_reset[keys.OBS], mask)
        return self._write(tensordict_reset)

    _reset_on_native_autoreset = _reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        self.flags[keys.GOAL_SELECTED].zero_()
        self.flags[keys.GOAL_RESELECTED].zero_()
        if self.action_values is not None:
            self.action_values.fill_(torch.nan)
        if not (self.active and self.selector.uses_goals):
            self.flags[keys.GOAL_REACHED].zero_()
            return self._write(next_tensordict)
        had_goal = self.has_goal.clone()
        # Algorithm 1 tests reached(s_t, g_t) at the top of step t, on the state the last step produced, so a
        # continuous goal reached by s_t -> s_{t+1} is replaced before a_{t+1} is chosen. A discrete goal
        # (g_s, g_a) is reached by taking g_a in a state matching g_s: the action taken in s_t decides.
        if self.space.discrete:
            achieved, action = self.space.project(tensordict[keys.OBS]), tensordict[keys.ACTION]
        else:
            achieved, action = self.space.project(next_tensordict[keys.OBS]), None
        reached = had_goal & goal_reached(self.space, achieved, action, self.goal, self.goal_action, self._scale())
        # In-place methods, not `+=`: augmented assignment re-sets the attribute through nn.Module's slow __setattr__.
        self.goal_steps.add_(had_goal)
        self.flags[keys.GOAL_REACHED] = reached
        random_phase = self.flags[keys.RANDOM_PHASE]
        if self.selector.episodic:
            random_phase |= reached
            drop = reached
        elif self.selector.per_step:
            drop = reached
        else:
            value_now = None
            if self.selector.adaptive:
                value_now, acting = self._current_values(next_tensordict[keys.OBS])
                if acting is not None:
                    self.action_values.copy_(acting)  # those of envs whose goal changes are replaced below
            drop = had_goal & self.selector.should_reselect(reached, value_now, self.value_at_selection)
        self.has_goal.bitwise_and_(~drop)
        # Reported once, on the step that reached the goal.
        steps_to_goal = torch.where(reached, self.goal_steps, 0)
        done = next_tensordict[keys.DONE].reshape(-1)
        if self.selector.episodic:
            # Episodes that end pursuing a goal (or in the random phase after reaching it) tell the rule its success.
            ended = done & (self.has_goal | random_phase)
            if bool(ended.any()):
                self.selector.episodes_ended(random_phase[ended], self.value_at_selection[ended])
        if self.selector.per_step:
            # Every env scores a fresh batch against its current goal (SUN per-step).
            self._select(next_tensordict[keys.OBS], ~done & ~random_phase, incumbent=self.has_goal.clone())
        else:
            self._select(next_tensordict[keys.OBS], ~self.has_goal & ~done & ~random_phase)
        self.flags[keys.GOAL_RESELECTED] = self.flags[keys.GOAL_SELECTED].clone()
        return self._write(next_tensordict, steps_to_goal)

    # ---- selection ------------------------------------------------------------------------
    def _select(self, obs: torch.Tensor, mask: torch.Tensor, incumbent: torch.Tensor | None = None) -> None:
        """Draw a candidate batch per masked env and keep the best-scoring goal (SelectGoal of Algorithm 1).

        With ``incumbent``, those envs' current goals compete with the batch
        and are kept unless a candidate scores strictly higher.
        """
        envs = mask.nonzero().squeeze(-1)
        if envs.numel() == 0:
            return
        if self.selector.pooled:
            self._select_pooled(obs, envs)
            return
        k = self.selector.num_candidates
        # The transform keeps its state beside the envs, on the CPU, wherever D lives.
        index = self.storage.sample_index((envs.numel(), k)).cpu()
        cand = self.storage.get(index.to(self.storage.device), (keys.OBS, keys.ACTION)).cpu()
        goals = self.space.project(cand[keys.OBS])
        goal_actions = cand[keys.ACTION] if self.space.discrete else None
        counts = self._counts(index)
        if incumbent is not None:
            index = torch.cat([index, self.goal_index[envs, None]], 1)
            goals = torch.cat([goals, self.goal[envs, None]], 1)
            if goal_actions is not None:
                goal_actions = torch.cat([goal_actions, self.goal_action[envs, None]], 1)
            counts = torch.cat([counts, self._counts(self.goal_index[envs, None])], 1)
        values, acting = self._values(obs[envs], goals, goal_actions, self._goal_keys(index))
        scores = self.selector.score(values, self.selector.novelty(goals, counts, self._achieved))
        if incumbent is not None:
            scores[:, -1] = torch.where(incumbent[envs], scores[:, -1], -torch.inf)
            # Ties keep the incumbent: switch only to a strictly better goal.
            best = torch.where(scores[:, :-1].amax(-1) > scores[:, -1], scores[:, :-1].argmax(-1), k)
            changed = best < k
            envs, best = envs[changed], best[changed]
            rows = changed.nonzero().squeeze(-1)
        else:
            best = scores.argmax(-1)
            rows = torch.arange(envs.numel())
        self.goal[envs] = goals[rows, best]
        self.goal_index[envs] = index[rows, best]
        if goal_actions is not None:
            self.goal_action[envs] = goal_actions[rows, best]
        chosen = values[..., rows, best]
        self.value_at_selection[envs] = chosen if chosen.dim() == 1 else chosen.mean(0)
        if acting is not None:
            self.action_values[envs] = acting[rows, best]
        self.has_goal[envs] = True
        self.goal_steps[envs] = 0
        self.flags[keys.GOAL_SELECTED][envs] = True

    def _select_pooled(self, obs: torch.Tensor, envs: torch.Tensor) -> None:
        """The k envs ``envs`` share one pool of candidates and take its k best distinct ones, best first.

        Candidate j is valued from the state of env ``envs[j mod k]`` (one value per candidate, as a rule that
        ranks one pool needs); the pool holds distinct storage entries.
        """
        index = self.storage.sample_index((self.selector.num_candidates,)).cpu().unique()
        goals = self.space.project(self.storage.get(index.to(self.storage.device), (keys.OBS,)).cpu()[keys.OBS])
        starts = obs[envs][torch.arange(index.numel()) % envs.numel()]
        values, _ = self._values(starts, goals.unsqueeze(1), None, actor=self.selector.value_actor)
        values = values.squeeze(-1).unsqueeze(-2)  # [E, 1, P]: one score per candidate
        novelty = self.selector.novelty(goals.unsqueeze(0), self._counts(index).unsqueeze(0), self._achieved)
        scores = self.selector.score(values, novelty)[0]
        best = scores.topk(min(envs.numel(), scores.numel())).indices
        best = best[torch.arange(envs.numel()) % best.numel()]  # a pool smaller than k (a tiny D) is reused
        self.goal[envs] = goals[best]
        self.goal_index[envs] = index[best]
        chosen = values[..., 0, best]
        self.value_at_selection[envs] = chosen if chosen.dim() == 1 else chosen.mean(0)
        self.has_goal[envs] = True
        self.goal_steps[envs] = 0
        self.flags[keys.GOAL_SELECTED][envs] = True

    def _values(
        self, obs: torch.Tensor, goals: torch.Tensor, goal_actions: torch.Tensor | None,
        goal_keys: torch.Tensor | None = None, actor: str = "online",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(s, g) of candidates ``[B, K]`` (``[E, B, K]``) and the acting values towards each ``[B, K, |A|]`` (or
        None); ``goal_keys`` (storage.goal_keys) lets the learner evaluate each distinct goal once."""
        learner = self.learner
        device = learner.device
        ga = goal_actions.to(device) if goal_actions is not None else None
        keys_ = None if goal_keys is None else goal_keys.to(device)
        extra = {} if actor == "online" else {"actor": actor}
        values, acting = learner.goal_values(obs.to(device), goals.to(device), ga, goal_keys=keys_, **extra)
        return values.cpu(), None if acting is None else acting.cpu()

    def _achieved(self, n: int) -> torch.Tensor:
        """n achieved goals drawn uniformly from D, ``[n, G]`` (CPU)."""
        index = self.storage.sample_index((n,))
        return self.space.project(self.storage.get(index, (keys.OBS,))[keys.OBS]).cpu()

    def _goal_keys(self, index: torch.Tensor) -> torch.Tensor | None:
        keys_ = self.storage.goal_keys(index.to(self.storage.device))
        return None if keys_ is None else keys_.cpu()

    def _counts(self, index: torch.Tensor) -> torch.Tensor:
        """Pseudocounts n_g of the storage entries at ``index`` (CPU), O(1) reads (SPEC §4)."""
        return self.replay.counts(index).cpu()

    def _scale(self) -> torch.Tensor | None:
        """The radius pseudocount's standardization σ̃ for the reach rule (``None`` for exact counts)."""
        scale = self.replay.scale()
        return None if scale is None else scale.cpu()

    def _current_values(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(s, g) of each env's current goal ``[B]`` (``[E, B]``), and its acting values ``[B, |A|]`` (or None)."""
        values, acting = self._values(obs, self.goal.unsqueeze(1), self.goal_action.unsqueeze(1))
        return values.squeeze(-1), None if acting is None else acting.squeeze(1)

    def _write(self, td: TensorDictBase, steps_to_goal: torch.Tensor | None = None) -> TensorDictBase:
        td[keys.GOAL] = self.goal.clone()
        td[keys.GOAL_ACTION] = self.goal_action.clone()
        td[keys.GOAL_STEPS] = torch.zeros_like(self.goal_steps) if steps_to_goal is None else steps_to_goal
        for name in _FLAGS:
            td[name] = self.flags[name].clone()
        if self.action_values is not None:
            td[keys.ACTION_VALUES] = self.action_values.clone()
        return td

    @staticmethod
    def _reset_mask(tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> torch.Tensor:
        batch = tensordict_reset.batch_size.numel()
        if tensordict is None or "_reset" not in tensordict.keys():
            return torch.ones(batch, dtype=torch.bool)
        return tensordict["_reset"].reshape(batch)
