"""Exploration metrics over every visit in the replay storage (SPEC §7)."""

from __future__ import annotations

import torch

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.metrics.coverage import binned_cells, cell_coverage_entropy, coverage_entropy_from_cells, num_binned_cells
from sun_lightning.metrics.knn_entropy import knn_entropy
from sun_lightning.replay.storage import GoalReplayStorage


def coverable_cells(space: GoalSpace) -> torch.Tensor:
    """Mask of the gridworld (tile, action) cells that count for coverage."""
    valid = torch.zeros(space.obs_dim, space.num_actions, dtype=torch.bool)
    valid[list(space.coverable)] = True
    return valid.flatten()


def exploration_metrics(storage: GoalReplayStorage, visits: torch.Tensor | None = None,
                        knn: bool = False) -> dict[str, float]:
    """Coverage and normalized entropy of the visited goal cells, plus k-NN entropy on request.

    Gridworlds: cells are (free tile, action) and the counts are exact: ``visits``, the exact
    pseudocount's cell counts. Continuous goals: 50 bins per goal dimension within the metric
    bounds (× actions), from D's entries.
    """
    space = storage.space
    if space.exact_counts:
        coverage, entropy = cell_coverage_entropy(visits.cpu(), coverable_cells(space))
        return {"explore/visits/coverage": coverage, "explore/visits/entropy": entropy}
    entries = storage.get(torch.arange(len(storage), device=storage.device)).cpu()
    goals = space.project(entries[keys.OBS])
    action = entries[keys.ACTION] if space.discrete else None
    low, high = space.metric_low or space.low, space.metric_high or space.high
    cells = binned_cells(goals, low, high, 50, action, space.num_actions)
    coverage, entropy = coverage_entropy_from_cells(cells, num_binned_cells(space.goal_dim, 50, space.num_actions))
    out = {"explore/visits/coverage": coverage, "explore/visits/entropy": entropy}
    if knn:
        # Its subsamples from a generator of their own: computed during training, it leaves the run's RNG alone.
        out["explore/visits/knn_entropy"] = knn_entropy(goals, low, high, action=action,
                                                        generator=torch.Generator().manual_seed(0))
    return out
