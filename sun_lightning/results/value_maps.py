"""What the learner and the selection rule see from a start state: V(s₀, g) and the selection score over goals.

SPEC §7 asks for SVF heatmaps V(s, g) where the state is 2-D; SUN picks the goal maximizing
V(s, g)/n_g (SPEC §1), so the score map shows why a goal was chosen. Both are read from s₀, the
first state of an episode in D, through the learner's own :meth:`~sun_lightning.learners.base.Learner.goal_values`
(the values the selection rule reads, dropout included), under ``no_grad`` and with the random
generators restored afterwards, so that drawing a picture never changes the training run's numbers.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from sun_lightning import keys
from sun_lightning.goals.base import GoalSelector
from sun_lightning.replay.storage import GoalReplayStorage
from sun_lightning.results.goal_grid import GoalGrid

#: Candidates a score map evaluates at most (continuous spaces: a uniform sample of D).
MAX_CANDIDATES = 4096


@contextlib.contextmanager
def evaluation(device: torch.device):
    """``no_grad``, with torch's random state (CPU, and the learner's GPU) restored on exit."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        yield


def start_observation(storage: GoalReplayStorage) -> torch.Tensor | None:
    """s₀: the observation of the first step of an episode held in D (``[obs_dim]``), or ``None`` if D is empty.

    An episode starts on the step after an episode end of the same env; before any episode
    ended, the oldest entry stands in for it (the first step of the run while D has not wrapped).
    """
    n = len(storage)
    if n == 0:
        return None
    ends = storage.columns.get(keys.EPISODE_END)[:n].nonzero().reshape(-1)
    start = torch.zeros((), dtype=torch.long, device=storage.device)
    if ends.numel():
        following, stored = storage.following(ends, 2)
        starts = following[:, 1][stored[:, 1]]
        if starts.numel():
            start = starts[0]
    return storage.columns.get(keys.OBS)[start].clone()


def _values(learner, obs: torch.Tensor, goals: torch.Tensor, goal_actions: torch.Tensor | None) -> torch.Tensor:
    """V(s, g) ``[K]`` of K goals from one state (ensembles: the members' mean, DISCOVER's μ)."""
    device = learner.device
    actions = None if goal_actions is None else goal_actions.to(device)[None]
    values, _ = learner.goal_values(obs.to(device)[None], goals.to(device)[None], actions)
    values = values.mean(0) if values.dim() == 3 else values
    return values[0].float().cpu()


def value_map(learner, grid: GoalGrid, obs: torch.Tensor) -> np.ndarray | None:
    """V(s₀, g) per image cell ``[rows, cols]`` (max over goal actions), NaN on walls; ``None`` where the goals
    of the image are not goals of the space (continuous spaces of more than two dimensions)."""
    if not grid.tiles and grid.space.goal_dim != 2:
        return None
    goals = grid.centres()
    actions = grid.space.num_actions
    with evaluation(learner.device):
        if actions:
            # V(s, g_s) as "reachable with some goal action": max over g_a (SPEC §2's goals are pairs).
            every = torch.arange(actions).repeat(len(goals))
            values = _values(learner, obs, goals.repeat_interleave(actions, 0), every)
            values = values.view(len(goals), actions).amax(-1)
        else:
            values = _values(learner, obs, goals, None)
    out = values.double().numpy().reshape(grid.shape)
    if grid.wall is not None:
        out[grid.wall] = np.nan
    return out


def score_map(learner, selector: GoalSelector, grid: GoalGrid, storage: GoalReplayStorage, pseudocount,
              obs: torch.Tensor, max_candidates: int = MAX_CANDIDATES) -> np.ndarray | None:
    """The selection rule's score of candidates from s₀, the best per image cell ``[rows, cols]`` (NaN: none).

    Candidates are what selection draws from: entries of D with their stored pseudocount (SPEC §3, §4).
    Gridworlds take every visited (tile, action) cell with its exact count; other spaces a uniform
    sample of ``max_candidates`` entries of D. (A rule whose score depends on the whole batch, the
    additive ablation's N_tot = Σ n_g, is scored on this batch.) ``None`` for rules without goals.
    """
    if not selector.uses_goals or len(storage) == 0:
        return None
    space = grid.space
    with evaluation(learner.device):
        if space.exact_counts:
            visits = pseudocount.visits().cpu()
            cells = visits.nonzero().reshape(-1)
            goals = torch.nn.functional.one_hot(cells // space.num_actions, space.obs_dim).float()
            actions, counts = cells % space.num_actions, visits[cells].float()
        else:
            n = len(storage)
            index = torch.randperm(n)[:max_candidates].to(storage.device)
            entries = storage.get(index, (keys.OBS, keys.ACTION)).cpu()
            goals = space.project(entries[keys.OBS])
            actions = entries[keys.ACTION] if space.discrete else None
            counts = pseudocount.counts(index).cpu()
        device = learner.device
        values, _ = learner.goal_values(obs.to(device)[None], goals.to(device)[None],
                                        None if actions is None else actions.to(device)[None])
        scores = selector.score(values.cpu(), counts[None])[0]
    return grid.maximum(goals, scores)
