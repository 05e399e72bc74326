"""Pseudocounts at several radii on one run's data, beside its true counts (the paper's appendix "Pseudocounts
ablation", Figure 22: log-scale heatmaps, true visit counts on top, pseudocounts on the same data at decreasing ρ below,
one colour scale per environment).

A run's checkpoint holds D. Each stored entry's goal projection is counted again, over all of D at once:

* its **true count**: the entries in its 50-bin cell over the metric bounds (:class:`~sun_lightning.replay.binned_count.BinnedCount`,
  the "true counts" of the ablation, SPEC §4);
* its **pseudocount at ρ**: the entries within ρ of it in the space standardized over D
  (:class:`~sun_lightning.replay.pseudocount.RadiusPseudocount`, the estimator SUN reads, D inserted as one batch so
  that σ is D's own).

Both include the entry itself and ignore goal actions (the picture is where D's goals lie, whatever action they
carry). A bin of the picture shows the mean count of the entries that fall in it (:class:`~sun_lightning.results.goal_grid.GoalGrid`'s
bins of the drawn plane; in a 2-D goal space the true-count panel is then D's histogram); bins without entries stay
black. Too small a radius gives every entry n ≈ 1 and too large a one gives every entry most of D: both flatten the
picture, which is the appendix's point. Gridworlds have nothing to show: their counts are exact.

``python -m sun_lightning.results.radius_maps CKPT [CKPT ...] --out FILE.png`` draws one column per checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning import keys
from sun_lightning.checkpoints.safe_pickle import read_checkpoint
from sun_lightning.envs.registry import goal_space
from sun_lightning.replay.binned_count import BinnedCount
from sun_lightning.replay.pseudocount import RadiusPseudocount
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.figure_cli import checkpoint_parser, read_each, write
from sun_lightning.results.heatmaps import _colorbar, count_norm, draw

#: The radii the paper's sweep draws, largest first (its rows go down in ρ).
RADII = (0.5, 0.25, 0.1, 0.05, 0.01)


@dataclass(frozen=True)
class StoredGoals:
    """The goal projections ``[N, goal_dim]`` (float64) of the entries a run's checkpoint holds in D."""

    env_id: str
    method: str
    frames: int
    goals: torch.Tensor


def stored_goals(path: str | Path) -> StoredGoals:
    """Read D's goal projections from a checkpoint of this package (``last.ckpt`` of a finished run).

    Raises:
        ValueError: the file is not a run checkpoint, its D is empty, or its environment counts exactly (a gridworld).
    """
    state = read_checkpoint(str(path))
    run, data = state.get("sun_run"), state.get("ExplorationDataModule")
    if not isinstance(run, dict) or not isinstance(data, dict) or "storage" not in data:
        raise ValueError(f"{path} is not a checkpoint of a sun_lightning run (no 'sun_run' and replay storage in it)")
    space = goal_space(run["env_id"])
    if space.exact_counts:
        raise ValueError(f"{run['env_id']} counts its goals exactly: its pseudocounts are its counts at every radius")
    columns = data["storage"]["columns"]
    if not columns or len(columns[keys.OBS]) == 0:
        raise ValueError(f"{path} holds an empty replay buffer")
    goals = space.project(columns[keys.OBS].to(torch.float64))
    return StoredGoals(run["env_id"], run.get("method", "?"), int(data["frames"]), goals)


def pseudocounts(goals: torch.Tensor, rho: float) -> torch.Tensor:
    """n of each of ``goals`` ``[N, M]`` at radius ``rho``: the goals within ``rho`` of it, itself included, in the
    space standardized over all of them (SPEC §4), ``[N]`` int64."""
    n, m = goals.shape
    counter = RadiusPseudocount(m, rho, capacity=n, sigma_every=max(n, 1))
    index = torch.arange(n)
    counter.insert(index, goals.to(torch.float64))
    return counter.counts(index)


def true_counts(goals: torch.Tensor, env_id: str) -> torch.Tensor:
    """n of each of ``goals`` ``[N, M]``: the goals in its 50-bin cell over the environment's metric bounds, ``[N]``."""
    space = goal_space(env_id)
    counter = BinnedCount(space.metric_low or space.low, space.metric_high or space.high, capacity=len(goals))
    index = torch.arange(len(goals))
    counter.insert(index, goals.to(torch.float64))
    return counter.counts(index).long()


def mean_image(grid: GoalGrid, goals: torch.Tensor, counts: torch.Tensor) -> np.ndarray:
    """Image ``[rows, cols]`` of the mean of ``counts`` ``[N]`` over the goals in each bin; NaN where none."""
    cells = grid.cells(goals)
    total = torch.zeros(grid.num_cells, dtype=torch.float64).index_add_(0, cells, counts.double().cpu())
    held = torch.bincount(cells, minlength=grid.num_cells).double()
    return (total / held).numpy().reshape(grid.shape)  # 0 / 0: NaN, an empty bin


def radius_images(data: StoredGoals, radii: Sequence[float] = RADII) -> dict[str, np.ndarray]:
    """Panel title → image: the true counts, then the pseudocounts at each of ``radii``."""
    grid = GoalGrid.of(data.env_id)
    images = {"true counts (50 bins)": mean_image(grid, data.goals, true_counts(data.goals, data.env_id))}
    for rho in radii:
        images[f"pseudocount, ρ = {rho:g}"] = mean_image(grid, data.goals, pseudocounts(data.goals, rho))
    return images


def radius_figure(columns: dict[str, StoredGoals], radii: Sequence[float] = RADII) -> Figure:
    """One column per run (label → its stored goals), rows: true counts then decreasing radii, one log colour range
    per column."""
    rows = 1 + len(radii)
    fig = Figure(figsize=(3.0 * len(columns) + 0.4, 2.6 * rows + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, len(columns), squeeze=False)
    for column, (label, data) in enumerate(columns.items()):
        grid = GoalGrid.of(data.env_id)
        images = radius_images(data, sorted(radii, reverse=True))
        norm = count_norm(*images.values())
        mapped = None
        for row, (title, image) in enumerate(images.items()):
            mapped = draw(axes[row, column], grid, image, norm, "viridis", f"{label}\n{title}" if row == 0 else title,
                          colorbar=False)
        _colorbar(fig, mapped, ax=axes[:, column], location="bottom", shrink=0.8, label="mean count of D's entries")
    fig.suptitle("Log-scale counts of D's goals: true counts, then pseudocounts at decreasing ρ", fontsize=10)
    return fig


def main(argv: Sequence[str] | None = None) -> None:
    parser = checkpoint_parser("sun_lightning.results.radius_maps", __doc__, "column")
    parser.add_argument("--rho", nargs="+", type=float, default=list(RADII), help="radii to draw (default: %(default)s)")
    args = parser.parse_args(argv)
    if any(rho < 0 for rho in args.rho):
        parser.error(f"radii must be ≥ 0, got {args.rho}")
    columns = {f"{data.env_id.split('/')[-1]} {data.method}, {data.frames} frames (N = {len(data.goals)})": data
               for data in read_each(parser, args.checkpoints, stored_goals)}
    write(radius_figure(columns, args.rho), args.out)


if __name__ == "__main__":
    main()
