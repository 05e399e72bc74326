"""Ensemble-disagreement baselines: DISCOVER and AdaGoal (SPEC §3; paper §"AdaGoal and DISCOVER").

Both score candidates with the mean μ(s_0, g) and standard deviation
σ(s_0, g) of an ensemble of SVFs (``values [E, B, K]``, e.g. from
:class:`~sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF`), pick the goal once
per episode from 2500 candidates and act uniformly at random after reaching it.

σ is the population standard deviation (divisor E), as ``jnp.std`` in
DISCOVER's official code. The choice scales σ by a constant, so it does not
change AdaGoal's argmax; for DISCOVER the sample std would act as
β·sqrt(E / (E − 1)).
"""

from __future__ import annotations

import torch

from sun_lightning.domains import NonNegativeFloat, PositiveInt, check_arguments
from sun_lightning.goals.base import GoalSelector


def ensemble_mean_std(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """μ and population σ over the ensemble axis of ``values [E, B, K]``, each ``[B, K]``."""
    if values.dim() != 3:
        raise ValueError(
            "ensemble rules need values [E, B, K] from an ensemble learner (e.g. EnsembleDQNSVF), "
            f"got shape {tuple(values.shape)}"
        )
    std, mean = torch.std_mean(values, dim=0, correction=0)
    return mean, std


class DISCOVER(GoalSelector):
    """DISCOVER's pure-exploration ("achievability + novelty") score μ(s_0, g) + β σ(s_0, g) (paper Eq. DISCOVER).

    Args:
        beta: novelty coefficient β: 10 for gridworlds and classic control, 1
            for GCRL control (paper appendix "Algorithm-specific").
        num_candidates: 2500 (paper appendix "Goal-selection").
    """

    episodic = True

    def __init__(self, beta: NonNegativeFloat = 10.0, num_candidates: PositiveInt = 2500) -> None:
        super().__init__(num_candidates)
        check_arguments(type(self), {"beta": beta})
        self.beta = beta

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        mean, std = ensemble_mean_std(values)
        return mean + self.beta * std


class AdaGoal(GoalSelector):
    """AdaGoal's deep-RL variant: the most uncertain goal, score σ(s_0, g) (paper Eq. AdaGoal).

    The best candidate is taken (argmax), as for SUN and DISCOVER. Without a
    reachability term this rule prefers goals the ensemble cannot yet reach
    (paper §"Why AdaGoal and DISCOVER Fail").

    Args:
        num_candidates: 2500 (paper appendix "Goal-selection").
    """

    episodic = True

    def __init__(self, num_candidates: PositiveInt = 2500) -> None:
        super().__init__(num_candidates)

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return ensemble_mean_std(values)[1]


class DISCOVERRaw(DISCOVER):
    """The paper's DISCOVER formula taken literally, μ + β σ of the raw values (the ``discover_raw`` method).

    The same rule as :class:`DISCOVER`, named apart so that runs of it are told from the paper's comparison: on
    discrete actions ``discover`` is this formula already (the paper's own code); on continuous actions ``discover``
    is the official TD3 selection (:class:`~sun_lightning.goals.discover.DISCOVERTD3`) and this one runs with β = 1
    beside it.
    """
