"""The goal-selection strategy interface (SPEC §3).

A strategy scores a batch of candidate goals drawn from the replay storage and
decides when the current goal is dropped. The :class:`GoalSelectionTransform`
does the rest (drawing candidates, reading values and counts, bookkeeping), so
adding a rule is one small class and one config value; the training loop never
changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from sun_lightning.domains import PositiveInt, check_arguments



@runtime_checkable
class GoalValues(Protocol):
    """What goal selection reads of the learner (SPEC §3): V(s, g) of candidate goals and the acting values towards
    them, its discount (``hparams.gamma``) and device. Every :class:`~sun_lightning.learners.base.Learner` is one."""

    device: torch.device
    hparams: Any

    def goal_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
                    goal_keys: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(s, g) ``[B, K]`` (``[E, B, K]`` for ensembles) and the acting values ``[B, K, |A|]`` or ``None``."""


class GoalSelector(ABC):
    """Base class of goal-selection rules.

    Args:
        num_candidates: size of the candidate batch C_t drawn uniformly from D.

    Class attributes:
        uses_goals: False for rules that act uniformly at random without goals.
        learns: False when no value function needs training (Random).
        episodic: goal chosen once per episode from the episode's first state;
            after reaching it the agent acts uniformly at random until the
            episode ends (DISCOVER-style random phase).
        per_step: a fresh candidate batch every step (SUN per-step).
        adaptive: ``should_reselect`` needs V(s_t, g_t) at every step.
        pooled: the envs that select at once share one candidate pool and take its best goals, distinct
            (:meth:`score` gets the pool as ``[E, 1, K]``, each candidate's value read from one selecting
            env's state); else every env scores a batch of its own.
        value_actor: which actor the values V(s, g) = Q(s, π(s, g), g) act with (TD3 variant):
            ``"online"`` or ``"target"`` (the bootstrap actor the TD targets read, SPEC §5b).
    """

    uses_goals: bool = True
    learns: bool = True
    episodic: bool = False
    per_step: bool = False
    adaptive: bool = False
    pooled: bool = False
    value_actor: str = "online"

    def __init__(self, num_candidates: PositiveInt = 256) -> None:
        check_arguments(GoalSelector.__init__, {"num_candidates": num_candidates})
        self.num_candidates = num_candidates

    @abstractmethod
    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Scores ``[B, K]`` of K candidates for each of B envs.

        Args:
            values: V(s, g) of each candidate, ``[B, K]``, or ``[E, B, K]`` for an
                ensemble of E critics.
            counts: pseudocounts n_g of the candidates, ``[B, K]`` (≥ 1).
        """

    def should_reselect(
        self, reached: torch.Tensor, value_now: torch.Tensor | None, value_at_selection: torch.Tensor
    ) -> torch.Tensor:
        """Whether each env drops its goal (beyond episode starts), ``[B]`` bool.

        The default is the episodic rule: only on reaching it.
        """
        return reached

    # ---- rules with state of their own (none by default) -----------------------------------
    def bind(self, learner: GoalValues, num_envs: int, horizon: int | None = None) -> None:
        """Called once by the selection transform with the learner whose values it scores, B and the episode
        horizon (``None`` where the env has none)."""

    def novelty(self, goals: torch.Tensor, counts: torch.Tensor | None,
                achieved: Callable[[int], torch.Tensor]) -> torch.Tensor | None:
        """What :meth:`score` gets as its second argument for candidates ``goals [..., K, G]``: their pseudocounts
        ``counts [..., K]`` by default; a rule may score another novelty, e.g. a density fitted on
        ``achieved(n)``, n achieved goals drawn uniformly from D ``[n, G]``."""
        return counts

    def episodes_ended(self, reached: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """The episodes that just ended while pursuing goals, ``[n]`` bool: whether each reached its goal, and
        ``values [n]``: its goal's value V(s, g) when it was selected (the ensemble's mean)."""

    def metrics(self) -> dict[str, float]:
        """The rule's own state, logged with the window's metrics (``explore/goals/...``)."""
        return {}

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the rule (an exact resume)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
