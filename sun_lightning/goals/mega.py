"""MEGA, Maximum Entropy Gain Exploration (Pitis et al., ICML 2020): the density-based goal selection the paper
argues against (paper §"Related work": density-based rules "score goals by novelty, committing to rare goals that
may be unreachable"). Not in the paper's tables; a baseline beside them.

MEGA draws candidate goals from the achieved goals in D, removes those whose value from the start state falls
below a cutoff that adapts to hold goal success in [0.3, 0.7], and pursues the *least dense* survivor under a
Gaussian kernel density of achieved goals. Where no candidate clears the cutoff, the most reachable one is taken.
SUN scores V/n instead: reachability and novelty traded off in one ratio, not a threshold and a minimum.

Two public implementations, one per learner variant:

* **TD3 variant, DISCOVER's MEGA** (:class:`MEGATD3`): the baseline in the code the paper's GCRL runs used
  (LeanderDiazBone/discover, commit 52c14285…, ``src/baselines/td3/td3_train.py``; preset ``MEGA`` of
  ``scripts/train.sh`` line 14). One pool of ``num_goals`` candidates for all envs (5000; lines 804–812), a KDE
  fitted on another ``num_goals`` achieved goals, standardized, Scott's bandwidth (``goal_density_estimator``,
  lines 752–759), viability ``mean Q(s_0, g) > cutoff`` with the critics' mean through the target actor (lines 715,
  818–820), the k envs take the k lowest of ``filter_achieved_goals(..., "MIN")`` (lines 771–781, 841–843): the
  least dense viable goals, then the non-viable ones most reachable first. The cutoff starts at 0 (line 447, 1252)
  and after each batch of B episodes (``adapt_mega_params``, lines 874–884) falls by 1 when success > 0.7, the
  cutoff is above the nearest-valued reached goal and stays ≥ 0, and rises by 1 when success < 0.3 and the cutoff
  is below 0.8 · horizon. The step is ``--mega_cutoff_step_size``, whose command-line default is 1 (``utils.py``
  line 98, set by none of ``train.sh``'s presets); the 5 of ``train``'s signature (line 418) is never reached. Q there counts discounted steps within reach
  (≈ γ^d / (1 − γ)); this project's first-hit V ≈ γ^d is put on that scale, Q = V / (1 − γ), as for
  :class:`~sun_lightning.goals.discover.DISCOVERTD3`.
* **DQN variant, mrl's MEGA** (:class:`MEGA`; spitis/mrl commit 97b3b63, ``mrl/modules/curiosity.py``,
  ``AchievedGoalCuriosity`` and ``DensityAchievedGoalCuriosity``, the ``minkde`` curiosity of
  ``experiments/mega/train_mega.py`` line 95): each selecting env draws ``num_sampled_ags`` = 100 achieved goals
  (line 309 of ``train_mega.py``; ``curiosity.py`` lines 137–139), a KDE with a fixed bandwidth 0.1 on 10 000
  standardized achieved goals (``train_mega.py`` lines 78 and 307, ``density.py`` lines 50–58), viability
  ``Q ≥ cutoff`` (``curiosity.py`` line 165: ``bad_q_idxs = q_values < self.cutoff``), the least dense viable goal
  (the softmax of −log density, lines 333–334, is monotone within one env's batch, so the argmin is the densest's
  opposite), else the most reachable (line 179: non-viable goals score ``q · −1e−8``). mrl's rewards are −1 per step, so
  Q ≈ −(1 − γ^d) / (1 − γ) = −(1 − V) / (1 − γ). The cutoff starts at ``initial_cutoff`` −3, which is also its
  maximum (``configs/discrete_off_policy.py`` line 27), its minimum is −(1 − r^(0.8 T)) / (1 − r) with
  r = min(γ, 0.99) (``curiosity.py`` lines 47–51); once 10 episodes have ended since its last move it falls by 1
  when their success is ≥ 0.7 and rises by 1 when ≤ 0.3 (lines 154–161, thresholds ``discrete_off_policy.py``
  line 26).

Where they differ and what this project keeps:

* The estimator: Scott's rule on the TD3 variant (DISCOVER), bandwidth 0.1 on the DQN variant (mrl). Both are
  :func:`~sun_lightning.goals.density.goal_log_density` in torch: at these sizes (5000 × 5000 pairs) it takes
  tens of milliseconds per selection on 2 CPU cores, with no scikit-learn dependency (BENCHMARKS.md).
* After the goal is reached: DISCOVER acts uniformly at random until the episode ends (``continue_strategy
  "uniform"``), as its DISCOVER does; mrl keeps the goal and adds ε = 0.1 of random actions per step since the
  success (``go_eexplore``). Both variants here take DISCOVER's random phase, which the project's DISCOVER and
  AdaGoal baselines also use, so that the baselines differ in their selection score only.
* DQN goals are (state, action) pairs: the density is that of the goal's state part (mrl's achieved goals are
  states); the pseudocount variant counts the pair, as SUN does.

:class:`MEGACount` and :class:`MEGACountTD3` (the ``mega_pseudocount`` method) replace the density by the
project's pseudocount n(g) (SPEC §4) and keep everything else, so the two show whether the density estimator or
the reachability filter separates MEGA from SUN.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import torch

from sun_lightning.domains import Fraction, PositiveFloat, PositiveInt, check_arguments
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.density import goal_log_density


def mega_scores(novelty: torch.Tensor, q: torch.Tensor, viable: torch.Tensor) -> torch.Tensor:
    """Scores (higher is better) of DISCOVER's ``filter_achieved_goals(..., out_type="MIN")`` negated, per row:
    viable candidates score ``−novelty`` (the least dense first); the others rank below every viable one, the
    most reachable (highest ``q``) first.

    Args:
        novelty: log density (or log count) of each candidate, ``[..., K]``.
        q: the candidates' values from the start state on the rule's scale, ``[..., K]``.
        viable: which candidates clear the cutoff, ``[..., K]`` bool.
    """
    novelty, q = novelty.double(), q.double()
    scaling = q - q.amax(-1, keepdim=True)  # ≤ 0: lower is less reachable
    far = 2 * novelty.abs().amax(-1, keepdim=True) - scaling
    return -torch.where(viable, novelty, far)


class MEGA(GoalSelector):
    """mrl's MEGA, the DQN variant's ``mega`` (see the module docstring for every constant's source).

    Args:
        num_candidates: achieved goals each selecting env draws (``num_sampled_ags``, 100).
        kde_samples: achieved goals the density is fitted on, drawn afresh at every selection (10 000).
        bandwidth: the kernel's bandwidth in standardized units (0.1); unset: Scott's rule.
        initial_cutoff: the cutoff's start and maximum on mrl's value scale, −(expected steps to the goal) (−3).
        cutoff_step: how far the cutoff moves (1).
        success_window: episodes between two moves of the cutoff (10).
        success_low, success_high: the cutoff rises when success ≤ low, falls when ≥ high (0.3, 0.7).
    """

    episodic = True
    novelty_from = "density"

    def __init__(self, num_candidates: PositiveInt = 100, kde_samples: PositiveInt = 10000,
                 bandwidth: PositiveFloat | None = 0.1, initial_cutoff: float = -3.0,
                 cutoff_step: PositiveFloat = 1.0, success_window: PositiveInt = 10,
                 success_low: Fraction = 0.3, success_high: Fraction = 0.7) -> None:
        super().__init__(num_candidates)
        check_arguments(MEGA.__init__, {"kde_samples": kde_samples, "bandwidth": bandwidth, "cutoff_step": cutoff_step,
                                        "success_window": success_window, "success_low": success_low,
                                        "success_high": success_high})
        if success_low >= success_high:
            raise ValueError(f"data.selector.success_low ({success_low}) must be below success_high ({success_high})")
        self.kde_samples, self.bandwidth = kde_samples, bandwidth
        self.initial_cutoff, self.cutoff_step = float(initial_cutoff), float(cutoff_step)
        self.success_window, self.success_low, self.success_high = success_window, success_low, success_high
        self.gamma: float | None = None
        self.cutoff = self.min_cutoff = self.floor = float(initial_cutoff)
        self.successes: deque[float] = deque(maxlen=success_window)
        self.viable_fraction = float("nan")

    def bind(self, learner, num_envs: int, horizon: int | None = None) -> None:
        self.gamma = float(learner.hparams.gamma)
        steps = 0.8 * (horizon or 0)
        r = min(self.gamma, 0.99)
        self.floor = -(1 - r**steps) / (1 - r) if horizon else -math.inf
        self.min_cutoff = max(self.initial_cutoff, self.floor)
        self.cutoff = self.min_cutoff

    # ---- scales ----------------------------------------------------------------------------
    def q_scale(self, values: torch.Tensor) -> torch.Tensor:
        """First-hit V ≈ γ^d on mrl's scale, Q = −(1 − V) / (1 − γ) (−1 reward per step)."""
        return -(1.0 - values.double()) / (1.0 - self._gamma())

    def _gamma(self) -> float:
        if self.gamma is None:
            raise RuntimeError(f"{type(self).__name__} needs the learner's gamma: bind() first")
        return self.gamma

    # ---- selection -------------------------------------------------------------------------
    def novelty(self, goals: torch.Tensor, counts: torch.Tensor | None,
                achieved: Callable[[int], torch.Tensor]) -> torch.Tensor:
        if self.novelty_from == "count":
            return torch.log(counts.double().clamp(min=1.0))
        return goal_log_density(achieved(self.kde_samples), goals, self.bandwidth)

    def viable(self, q: torch.Tensor) -> torch.Tensor:
        return q >= self.cutoff

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        q = self.q_scale(values.mean(0) if values.dim() == 3 else values)
        self.before_filter(q)
        viable = self.viable(q)
        self.viable_fraction = float(viable.double().mean())
        return mega_scores(counts, q, viable)

    def before_filter(self, q: torch.Tensor) -> None:
        """mrl's cutoff update, made as the goals are chosen (``curiosity.py`` lines 154–161)."""
        if len(self.successes) < self.success_window:
            return
        self.min_cutoff = max(self.floor, min(float(q.min()), self.min_cutoff))
        rate = sum(self.successes) / len(self.successes)
        if rate >= self.success_high:
            self.cutoff = max(self.min_cutoff, self.cutoff - self.cutoff_step)
            self.successes.clear()
        elif rate <= self.success_low:
            self.cutoff = max(min(self.initial_cutoff, self.cutoff + self.cutoff_step), self.floor)
            self.successes.clear()

    def episodes_ended(self, reached: torch.Tensor, values: torch.Tensor | None = None) -> None:
        self.successes.extend(float(r) for r in reached.reshape(-1).tolist())

    # ---- logging and checkpoints -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return {"explore/goals/cutoff": self.cutoff, "explore/goals/viable": self.viable_fraction}

    def state_dict(self) -> dict:
        return {"cutoff": self.cutoff, "min_cutoff": self.min_cutoff, "successes": list(self.successes)}

    def load_state_dict(self, state: dict) -> None:
        self.cutoff, self.min_cutoff = state["cutoff"], state["min_cutoff"]
        self.successes = deque(state["successes"], maxlen=self.success_window)


class MEGATD3(MEGA):
    """DISCOVER's MEGA, the TD3 variant's ``mega`` (see the module docstring for every constant's source).

    Args:
        num_candidates: the shared pool (``num_goals``: 5000; 10000 on the ant mazes, as DISCOVER's presets).
        kde_samples: achieved goals the density is fitted on (``num_goals`` again).
        bandwidth: unset: Scott's rule with the full covariance (``jax.scipy.stats.gaussian_kde``).
        initial_cutoff: the cutoff's start on DISCOVER's scale, Q = V / (1 − γ) (0, also its minimum).
        cutoff_step: ``--mega_cutoff_step_size`` (1, the official command line's default).
        success_window: unused (the cutoff moves after every batch of B episodes).
        success_low, success_high: the band (0.3, 0.7).
    """

    pooled = True
    value_actor = "target"

    def __init__(self, num_candidates: PositiveInt = 5000, kde_samples: PositiveInt = 5000,
                 bandwidth: PositiveFloat | None = None, initial_cutoff: float = 0.0,
                 cutoff_step: PositiveFloat = 1.0, success_window: PositiveInt = 1,
                 success_low: Fraction = 0.3, success_high: Fraction = 0.7) -> None:
        super().__init__(num_candidates, kde_samples, bandwidth, initial_cutoff, cutoff_step, success_window,
                         success_low, success_high)
        self.ceiling = math.inf
        self.round_size = 1
        self.episodes, self.reached, self.furthest = 0, 0, math.inf

    def bind(self, learner, num_envs: int, horizon: int | None = None) -> None:
        space = getattr(learner, "goal_space", None)
        if space is not None and space.discrete:
            raise ValueError(f"{type(self).__name__} is the TD3 variant's MEGA (continuous actions); the DQN "
                             f"variant's is sun_lightning.goals.mega.{type(self).__name__.removesuffix('TD3')}")
        self.gamma = float(learner.hparams.gamma)
        self.round_size = num_envs
        self.ceiling = 0.8 * horizon if horizon else math.inf
        self.cutoff = self.min_cutoff = self.initial_cutoff

    def q_scale(self, values: torch.Tensor) -> torch.Tensor:
        """First-hit V ≈ γ^d on DISCOVER's scale, Q = V / (1 − γ)."""
        return values.double() / (1.0 - self._gamma())

    def viable(self, q: torch.Tensor) -> torch.Tensor:
        return q > self.cutoff  # td3_train.py line 820

    def before_filter(self, q: torch.Tensor) -> None:
        pass  # the cutoff moves after each batch of episodes (episodes_ended)

    def episodes_ended(self, reached: torch.Tensor, values: torch.Tensor | None = None) -> None:
        reached = reached.reshape(-1)
        self.episodes += reached.numel()
        self.reached += int(reached.sum())
        if values is not None:
            # ``furthest_achieved = min(Q · achieved)`` over the batch (line 875): 0 once a goal was missed.
            self.furthest = min(self.furthest, float((self.q_scale(values.reshape(-1)) * reached).min()))
        if self.episodes >= self.round_size:
            self.adapt(self.reached / self.episodes, self.furthest)
            self.episodes, self.reached, self.furthest = 0, 0, math.inf

    def adapt(self, success: float, furthest: float) -> None:
        """One step of ``adapt_mega_params`` (positive rewards branch, lines 881–883)."""
        decrease = success > self.success_high and self.cutoff > furthest and self.cutoff - self.cutoff_step >= self.initial_cutoff
        increase = success < self.success_low and self.cutoff < self.ceiling
        self.cutoff += (int(increase) - int(decrease)) * self.cutoff_step

    def state_dict(self) -> dict:
        return {"cutoff": self.cutoff, "episodes": self.episodes, "reached": self.reached, "furthest": self.furthest}

    def load_state_dict(self, state: dict) -> None:
        self.cutoff, self.episodes, self.reached, self.furthest = (state["cutoff"], state["episodes"],
                                                                   state["reached"], state["furthest"])


class MEGACount(MEGA):
    """mrl's MEGA with the density replaced by the pseudocount n(g) (the DQN variant's ``mega_pseudocount``)."""

    novelty_from = "count"


class MEGACountTD3(MEGATD3):
    """DISCOVER's MEGA with the density replaced by the pseudocount n(g) (the TD3 variant's ``mega_pseudocount``)."""

    novelty_from = "count"
