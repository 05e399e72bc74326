"""SUN variants and indicator ablations (SPEC §3; paper §"Ablations", appendix "Additive vs. Multiplicative SUN").

* :class:`SUNEpisodic`: SUN's score V/n, but the goal is chosen once per
  episode from 2500 candidates, DISCOVER-style (random phase after reaching).
* :class:`SUNAdditive`: the UCB1-style additive indicator V + sqrt(log N_tot / n_g).
* :class:`NoveltyOnly`: 1 / n_g.
* :class:`ReachabilityOnly`: V.

The three ablations keep SUN's adaptive reselection (reached, or
V(s_t, g_t) < V(s_sel, g_t)) and change only the score, so that the ablation
isolates the indicator. SUN per-step (SPEC §3) needs a transform change and
is not here.
"""

from __future__ import annotations

import torch

from sun_lightning.domains import PositiveInt
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.sun import SUNAdaptive


class SUNEpisodic(GoalSelector):
    """SUN's score V(s_0, g) / n_g with DISCOVER's episodic goal selection (SPEC §3, paper footnote on episodic selection).

    The goal is drawn once per episode from the first state; after reaching it
    the agent acts uniformly at random until the episode ends (the random
    phase is applied by the transform). Only reaching drops the goal.

    Args:
        num_candidates: 2500 for episodic rules (paper appendix "Goal-selection").
    """

    episodic = True
    score = SUNAdaptive.score  # same indicator; only the reselection schedule differs

    def __init__(self, num_candidates: PositiveInt = 2500) -> None:
        super().__init__(num_candidates)


class SUNAdditive(SUNAdaptive):
    """Additive ablation: score V(s, g) + sqrt(log N_tot / n_g), adaptive reselection (SPEC §3).

    N_tot = Σ n_g is taken over the candidate batch of each env (the counts the
    score sees), not over the whole buffer. The paper's footnote identifies
    Σ_g n_g with the number of buffer entries T; over a uniform candidate batch
    of size K, Σ_k n_k ≈ K · E_D[n], so the two differ by a term inside the log
    that changes slowly with T, and both make the bonus vanish as counts grow
    (the saturation failure mode the ablation shows). The candidate sum needs
    nothing beyond the ``score(values, counts)`` interface.
    """

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        counts = counts.float()  # the radius pseudocount stores int64 counts
        total = counts.sum(-1, keepdim=True)
        return values + torch.sqrt(torch.log(total) / counts)


class NoveltyOnly(SUNAdaptive):
    """Novelty-only ablation: score 1 / n_g, adaptive reselection (SPEC §3).

    The value is ignored for scoring but still drives reselection
    (V(s_t, g_t) < V(s_sel, g_t)), as in SUN.
    """

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return counts.float().reciprocal()


class ReachabilityOnly(SUNAdaptive):
    """Reachability-only ablation: score V(s, g), adaptive reselection (SPEC §3)."""

    def score(self, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return values
