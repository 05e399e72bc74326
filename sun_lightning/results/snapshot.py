"""The numbers behind one run's heatmaps at one moment of training (SPEC §7; paper appendix "Detailed analysis").

A :class:`HeatmapSnapshot` holds images over the run's :class:`~sun_lightning.results.goal_grid.GoalGrid`:

- ``visits``: the entries of D per cell (the replay contents, the visitation density the metrics count);
- ``selected`` / ``reached``: goals selected / reached since the previous snapshot (the paper shows
  goal selections at 25/50/75/100 % of training);
- ``values``: V(s₀, g); ``scores``: the selection rule's score from s₀ (:mod:`~sun_lightning.results.value_maps`);
- ``eval_points`` / ``eval_success``: where the goals of the latest goal-reaching evaluation lie in the picture
  and the fraction of those reached there (:mod:`sun_lightning.metrics.evaluation`; goals sharing a position, as the goal
  actions of a tile or PointMaze-H's cells over one column, are averaged).

It is saved beside its picture (``heatmaps/heatmaps_<pct>.npz``), so that a comparison report draws
every method's final heatmaps on one colour scale without re-running anything.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.goals.base import GoalSelector
from sun_lightning.replay.storage import GoalReplayStorage
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.value_maps import score_map, start_observation, value_map

#: The count images of a snapshot, drawn log-scale.
COUNT_PANELS = ("visits", "selected", "reached")


@dataclass
class HeatmapSnapshot:
    """Heatmap images ``[rows, cols]`` of one run at ``frames`` env frames (``percent`` of its budget).

    ``values`` and ``scores`` are ``None`` where they do not apply (Random learns no V and selects no
    goals; V over bins needs a 2-D goal space); ``start`` is s₀'s position in the image's coordinates.
    """

    env_id: str
    frames: int
    percent: int
    visits: np.ndarray
    selected: np.ndarray
    reached: np.ndarray
    values: np.ndarray | None = None
    scores: np.ndarray | None = None
    start: tuple[float, float] | None = None
    selector: str = ""
    eval_points: np.ndarray | None = None
    eval_success: np.ndarray | None = None
    eval_frames: int = -1

    def save(self, path: str | Path) -> None:
        """Write the snapshot as ``.npz`` (plain arrays, no pickles)."""
        arrays = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                arrays[field.name] = np.asarray(value)
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> HeatmapSnapshot:
        with np.load(path, allow_pickle=False) as data:
            get = {name: data[name] for name in data.files}
        start = get.get("start")
        return cls(env_id=str(get["env_id"]), frames=int(get["frames"]), percent=int(get["percent"]),
                   visits=get["visits"], selected=get["selected"], reached=get["reached"],
                   values=get.get("values"), scores=get.get("scores"),
                   start=None if start is None else (float(start[0]), float(start[1])),
                   selector=str(get.get("selector", "")), eval_points=get.get("eval_points"),
                   eval_success=get.get("eval_success"), eval_frames=int(get.get("eval_frames", -1)))


def success_points(grid: GoalGrid, goal: torch.Tensor, reached: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Where evaluation goals ``[N, goal_dim]`` are drawn (``[M, 2]``, distinct positions) and the fraction of the
    goals at each that were reached (``[M]``)."""
    points = torch.tensor([grid.position(g) for g in goal], dtype=torch.float64).reshape(-1, 2)
    unique, inverse = torch.unique(points, dim=0, return_inverse=True)
    hits = torch.zeros(len(unique), dtype=torch.float64).index_add_(0, inverse, reached.double())
    counts = torch.zeros(len(unique), dtype=torch.float64).index_add_(0, inverse, torch.ones(len(inverse), dtype=torch.float64))
    return unique.numpy(), (hits / counts).numpy()


def take_snapshot(learner, grid: GoalGrid, selected: list[torch.Tensor], reached: list[torch.Tensor], frames: int,
                  percent: int, *, env_id: str, storage: GoalReplayStorage, pseudocount, space: GoalSpace,
                  selector: GoalSelector, evaluation=None, eval_frames: int = -1) -> HeatmapSnapshot:
    """The snapshot of a running fit: D's contents, the goals given, and V and the score from s₀.

    Args:
        learner: the run's learner.
        grid: the run's goal grid.
        selected, reached: goal projections ``[n_i, goal_dim]`` selected / reached since the last snapshot.
        frames, percent: when.
        env_id, storage, pseudocount, space, selector: the run's environment, its replay storage D and D's counts
            (SPEC §4), its goal space and its selection rule.
        evaluation: the latest :class:`~sun_lightning.metrics.evaluation.EvalResult`, if the run evaluates, and
            ``eval_frames``, the env frames it was taken at.
    """
    n = len(storage)
    if storage.tiles is not None:
        visits = grid.counts(storage.tiles[:n])  # the exact spaces' tile per entry, kept by D
    elif n:
        visits = grid.histogram(space.project(storage.columns.get(keys.OBS)[:n]))
    else:
        visits = np.zeros(grid.shape)
    empty = torch.zeros(0, space.goal_dim)
    goals = [grid.histogram(torch.cat([empty, *window])) for window in (selected, reached)]
    snapshot = HeatmapSnapshot(env_id, frames, percent, visits, *goals, selector=type(selector).__name__)
    if evaluation is not None:
        snapshot.eval_points, snapshot.eval_success = success_points(grid, evaluation.goals.goal, evaluation.reached)
        snapshot.eval_frames = eval_frames
    obs = start_observation(storage)
    if obs is None or not selector.learns:
        return snapshot
    snapshot.start = grid.position(space.project(obs.cpu()))
    snapshot.values = value_map(learner, grid, obs)
    snapshot.scores = score_map(learner, selector, grid, storage, pseudocount, obs)
    return snapshot
