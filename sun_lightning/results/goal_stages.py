"""Goals selected and reached at 25/50/75/100 % of training, methods side by side (the paper's appendix "Detailed
analysis", whose figures show each method's goal selections at the four quarters of training).

Each run saves a heatmap snapshot at each quarter (:mod:`~sun_lightning.results.snapshot`: the goals selected and
reached since the previous one); this figure puts one run per method (its lowest seed) in rows of two, goals selected
over goals reached, with a column per stage. Every "selected" panel shares one log colour range, and every "reached"
panel another, so that methods and stages compare by colour; each row has its colour bar beside it.
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.heatmaps import TITLES, _colorbar, count_norm, draw
from sun_lightning.results.snapshot import HeatmapSnapshot

#: What a stage's panels show, one row each per method.
GOAL_PANELS = ("selected", "reached")


def goal_stages_figure(grid: GoalGrid, runs: dict[str, dict[int, HeatmapSnapshot]], title: str) -> Figure:
    """Methods × (selected, reached) rows, stages (percent of training) columns.

    Args:
        grid: the environment's goal grid.
        runs: method label → percent → that run's snapshot (stages a run did not save are left blank).
        title: the figure's title.
    """
    stages = sorted({p for snapshots in runs.values() for p in snapshots})
    rows = [(label, name) for label in runs for name in GOAL_PANELS]
    fig = Figure(figsize=(2.7 * max(len(stages), 1) + 0.6, 2.3 * len(rows) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), max(len(stages), 1), squeeze=False)
    for name in GOAL_PANELS:
        norm = count_norm(*(getattr(s, name) for snapshots in runs.values() for s in snapshots.values()))
        for row, (label, panel) in enumerate(rows):
            if panel != name:
                continue
            # a colour bar per row: one spanning the interleaved rows of a kind would overlap the other kind's
            mapped, used = None, []
            for column, percent in enumerate(stages):
                ax, snapshot = axes[row, column], runs[label].get(percent)
                if snapshot is None:
                    ax.set_axis_off()
                    continue
                image = getattr(snapshot, name)
                mapped = draw(ax, grid, image, norm, "viridis",
                              f"{label}: {TITLES[name]}\n{percent} % ({snapshot.frames} frames): {int(image.sum())}",
                              colorbar=False)
                used.append(ax)
            if mapped is not None:
                _colorbar(fig, mapped, ax=used, location="right", shrink=0.9, label=TITLES[name])
    if not grid.tiles:  # bins: name the drawn axes (Pendulum's θ and θ̇, a maze's x and y)
        for row in axes:
            row[0].set_ylabel(grid.axis_labels[1], fontsize=7)
        for ax in axes[-1]:
            ax.set_xlabel(grid.axis_labels[0], fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
