"""DISCOVER as its official TD3 code selects goals (SPEC §3; paper §"AdaGoal and DISCOVER", appendix "GCRL control").

The paper's GCRL runs used DISCOVER's public JAX code (GitHub repository LeanderDiazBone/discover, commit
52c14285ae654af14891b84dc9c3de19be9fa7c1), with the ``DISCOVER_NO_DIR`` preset of ``scripts/train.sh``
(line 15: no target goal, so the direction terms are 0) and ``--transform_ucb --adaptation_strategy=simple``
(line 26). What that code does, and where (``src/baselines/td3/td3_train.py`` unless named):

* **Values on the distance scale** (``compute_value_function``, lines 702–735): each critic's value of a
  candidate is turned into steps to the goal, ``−log((1 − γ)·max(Q + 0.01, 0.001)) / log γ`` (lines
  728–730), and the score uses the mean and the population std (``jnp.std``) of those over the ensemble.
  The official Q counts discounted steps within the reach threshold, ≈ γ^d / (1 − γ) (up to 1 / (1 − γ)):
  its reward is 1 on every step within reach. This project's V is the paper's first-hit SVF, ≈ γ^d
  (SPEC §1), so V is put on the official scale, Q = V / (1 − γ), before the official formula; the
  transformed value is then ≈ −d, minus the steps to the goal.
* **Values through the target actor** (line 715): V(s, g) = Q(s, π'(s, g), g) with the online critics, π' the
  bootstrap actor (``target_policy_params``: the online actor as of the previous actor step, moved τ towards
  the current one; :class:`~sun_lightning.learners.target.FollowStep`).
* **One pool for all envs** (``goal_selection``, lines 792–872): ``num_goals`` achieved goals drawn from
  the buffer (lines 804–812; 5000 in the point-maze and arm presets, ``scripts/train.sh`` lines 1–2 and
  5–6, 10000 in the ant-maze presets, lines 3–4), each scored from a fresh start state (line 817), and
  the envs take the top ``num_envs`` of the pool (``argpartition``, line 866): distinct candidates.
* **Score** ``w_μ · μ + w_σ · σ`` (line 864 with the target terms 0): ``w_σ = 1`` (``--ucb_std_ini=1.0``),
  ``w_μ`` starts at 0 (``--ucb_mean_ini=0.0``) and adapts.
* **The "simple" adaptation** (``adapt_ucb_params``, lines 886–910, the branch of lines 895–900): after
  each batch of ``num_envs`` episodes (one ``training_step``, line 1031) with goal success rate r,
  ``w_μ −= step`` if r > 0.5 + 0.2, ``w_μ += step`` if r < 0.5 − 0.2, then ``w_μ`` is clipped to
  [0, 2·m], with m = (w_μ,0 + w_σ) / 2 = 0.5 and step = m / ``adaptation_rate``; the target 0.5 and the
  rate 100 are the defaults of ``utils.py`` (lines 127 and 126), the band 0.2 is line 894. Low success
  moves weight onto μ, towards goals the critics agree are near.
* **After reaching the goal** the agent acts uniformly at random until the episode ends
  (``continue_strategy="uniform"``, ``actor_step`` line 125): the episodic random phase.

Kept from the paper rather than the code: 4 critics (the paper's number; the code's default is 6), and
this project's network, TD3 and relabelling (SPEC §5b). A candidate is scored from the state of one of
the selecting envs (candidate j from env j mod k), the envs' start states standing in for the code's
fresh reset per candidate.
"""

from __future__ import annotations

import math

import torch

from sun_lightning.domains import Fraction, NonNegativeFloat, PositiveInt, check_arguments
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.ensemble import ensemble_mean_std


def distance_scale(values: torch.Tensor, gamma: float) -> torch.Tensor:
    """The official transformed value of first-hit SVF values V ≈ γ^d: ``−log((1−γ)·max(Q + 0.01, 0.001)) / log γ``
    of Q = V / (1 − γ), ≈ −d (``td3_train.py`` lines 728–730)."""
    q = values / (1.0 - gamma)
    q = torch.clamp(q + 0.01, min=0.001)
    return -torch.log((1.0 - gamma) * q) / math.log(gamma)


class DISCOVERTD3(GoalSelector):
    """DISCOVER's pure-exploration selection as its official TD3 code runs it (see the module docstring).

    Reads every critic's V(s, g) through the target actor, scores a shared pool of candidates by
    ``mean_weight · μ + std_weight · σ`` of their values on the distance scale, gives the k envs
    selecting together the k best distinct candidates, and moves ``mean_weight`` after each batch of
    B episodes to hold goal success within ``success_target ± success_band``.

    Args:
        num_candidates: the pool size, ``num_goals`` (5000 for point mazes and the arm, 10000 for ant mazes).
        mean_weight: initial weight on μ (``--ucb_mean_ini``: 0).
        std_weight: weight on σ (``--ucb_std_ini``: 1).
        success_target, success_band: the adaptation holds goal success in target ± band (0.5, 0.2).
        adaptation_rate: the weight moves by ``(mean_weight + std_weight) / 2 / adaptation_rate`` (100).
    """

    episodic = True
    pooled = True
    value_actor = "target"

    def __init__(self, num_candidates: PositiveInt = 5000, mean_weight: NonNegativeFloat = 0.0,
                 std_weight: NonNegativeFloat = 1.0, success_target: Fraction = 0.5,
                 success_band: Fraction = 0.2, adaptation_rate: PositiveInt = 100) -> None:
        super().__init__(num_candidates)
        check_arguments(type(self), {"mean_weight": mean_weight, "std_weight": std_weight,
                                     "success_target": success_target, "success_band": success_band,
                                     "adaptation_rate": adaptation_rate})
        self.mean_weight, self.std_weight = float(mean_weight), float(std_weight)
        self.success_target, self.success_band = success_target, success_band
        self.mid = (mean_weight + std_weight) / 2
        self.step = self.mid / adaptation_rate
        self.gamma: float | None = None
        self.round_size = 1
        self.episodes = self.reached = 0  # of the batch of episodes not yet adapted on

    def bind(self, learner, num_envs: int, horizon: int | None = None) -> None:
        space = getattr(learner, "goal_space", None)
        if space is not None and space.discrete:
            raise ValueError("DISCOVERTD3 is the TD3 variant's selection (continuous actions); the DQN variant's "
                             "DISCOVER is sun_lightning.goals.ensemble.DISCOVER")
        self.gamma = float(learner.hparams.gamma)
        self.round_size = num_envs

    def score(self, values: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        if self.gamma is None:
            raise RuntimeError("DISCOVERTD3.score needs the learner's gamma: bind() first")
        mean, std = ensemble_mean_std(distance_scale(values, self.gamma))
        return self.mean_weight * mean + self.std_weight * std

    def episodes_ended(self, reached: torch.Tensor, values: torch.Tensor | None = None) -> None:
        self.episodes += reached.numel()
        self.reached += int(reached.sum())
        if self.episodes >= self.round_size:
            self.adapt(self.reached / self.episodes)
            self.episodes = self.reached = 0

    def adapt(self, success: float) -> None:
        """One step of the "simple" adaptation on a batch's goal success rate."""
        if success > self.success_target + self.success_band:
            self.mean_weight -= self.step
        if success < self.success_target - self.success_band:
            self.mean_weight += self.step
        self.mean_weight = min(max(self.mean_weight, 0.0), 2 * self.mid)

    def metrics(self) -> dict[str, float]:
        return {"explore/goals/mean_weight": self.mean_weight}

    def state_dict(self) -> dict:
        return {"mean_weight": self.mean_weight, "episodes": self.episodes, "reached": self.reached}

    def load_state_dict(self, state: dict) -> None:
        self.mean_weight, self.episodes, self.reached = state["mean_weight"], state["episodes"], state["reached"]
