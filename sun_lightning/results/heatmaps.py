"""Drawing heatmap snapshots: one run at one moment, and the final heatmaps of several methods side by side.

Counts are drawn on a log scale (SPEC §7), empty cells black and gridworld walls grey as in the
paper's figures; V(s₀, g) on a linear [0, 1] scale; the selection score on a log scale where it is
positive. s₀ is marked with a white star. Figures are built with matplotlib's object API on the
Agg canvas: no pyplot, no global backend, nothing shown.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.snapshot import COUNT_PANELS, HeatmapSnapshot

TITLES = {"visits": "visits in D", "selected": "goals selected", "reached": "goals reached",
          "values": "V(s₀, g)", "scores": "selection score"}
_WALL_RGBA = (0.55, 0.55, 0.55, 1.0)
_EMPTY = "black"


def count_norm(*images: np.ndarray) -> LogNorm:
    """One log colour range for count images: 1 to their largest count."""
    top = max((float(np.nanmax(image)) for image in images if image.size), default=1.0)
    return LogNorm(vmin=1.0, vmax=max(top, 2.0))


def _colorbar(fig, mapped, **kwargs) -> None:
    bar = fig.colorbar(mapped, **kwargs)
    bar.ax.tick_params(labelsize=6)
    if isinstance(mapped.norm, LogNorm):
        # Counts read as counts (1, 10, 100), not as 10⁰, 2 × 10⁰, …
        bar.formatter = FuncFormatter(lambda value, _: f"{value:g}")
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
        bar.ax.xaxis.set_minor_formatter(NullFormatter())
        bar.update_ticks()


def draw(ax, grid: GoalGrid, image: np.ndarray, norm, cmap: str, title: str,
         start: tuple[float, float] | None = None, colorbar: bool = True):
    """One heatmap panel on ``ax``: ``image`` ``[rows, cols]`` over ``grid`` (NaN and, under a log norm, 0: empty).

    Returns the image's mappable (for a colour bar shared by several panels).
    """
    shown = np.array(image, dtype=float)
    if isinstance(norm, LogNorm):
        shown[shown <= 0] = np.nan
    colours = matplotlib.colormaps[cmap].with_extremes(bad=_EMPTY)
    if grid.tiles:
        mapped = ax.imshow(shown, cmap=colours, norm=norm, interpolation="nearest")
        if grid.wall is not None:
            walls = np.zeros((*grid.shape, 4))
            walls[grid.wall] = _WALL_RGBA
            ax.imshow(walls, interpolation="nearest")
        for row in grid.row_walls:
            ax.axhline(row - 0.5, color=_WALL_RGBA, linewidth=3)
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        mapped = ax.imshow(shown, cmap=colours, norm=norm, origin="lower", extent=grid.extent, aspect="auto",
                           interpolation="nearest")
        ax.tick_params(labelsize=6)
    if not np.isfinite(shown).any():
        # An empty panel says so, rather than looking like a black map (Random selects no goals).
        ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center", va="center", color="white", fontsize=9)
    if start is not None:
        ax.plot(*start, marker="*", color="white", markeredgecolor="black", markersize=9)
    ax.set_title(title, fontsize=8)
    if colorbar:
        _colorbar(ax.figure, mapped, ax=ax, fraction=0.046, pad=0.04)
    return mapped


def _score_norm(scores: np.ndarray):
    finite = scores[np.isfinite(scores)]
    if finite.size and finite.min() > 0:
        top = float(finite.max())
        return LogNorm(vmin=max(float(finite.min()), top * 1e-4), vmax=top if top > 0 else 1.0)
    return Normalize()


def snapshot_figure(grid: GoalGrid, snapshot: HeatmapSnapshot, title: str) -> Figure:
    """One run at one moment: visits, goals selected and reached, and where they apply V(s₀, g) and the score."""
    panels = [name for name in (*COUNT_PANELS, "values", "scores") if getattr(snapshot, name) is not None]
    fig = Figure(figsize=(3.1 * len(panels), 3.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    window = "since the last snapshot"
    for ax, name in zip(axes, panels):
        image = getattr(snapshot, name)
        if name in COUNT_PANELS:
            label = TITLES[name] + ("" if name == "visits" else f"\n({window}: {int(image.sum())})")
            draw(ax, grid, image, count_norm(image), "viridis", label)
        elif name == "values":
            draw(ax, grid, image, Normalize(0.0, 1.0), "magma", TITLES[name], snapshot.start)
        else:
            title = f"{TITLES[name]} ({snapshot.selector})"
            draw(ax, grid, image, _score_norm(image), "viridis", title, snapshot.start)
    if not grid.tiles:
        axes[0].set_xlabel(grid.axis_labels[0], fontsize=7)
        axes[0].set_ylabel(grid.axis_labels[1], fontsize=7)
    fig.suptitle(f"{title}: {snapshot.percent} % of training ({snapshot.frames} env frames)", fontsize=9)
    return fig


def comparison_figure(grid: GoalGrid, snapshots: dict[str, HeatmapSnapshot], title: str) -> Figure:
    """Methods (rows) × visits / goals selected / goals reached (columns), each column on one log colour range
    (the paper's heatmaps share their colour range)."""
    rows = list(snapshots)
    fig = Figure(figsize=(3.0 * len(COUNT_PANELS), 2.7 * len(rows) + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), len(COUNT_PANELS), squeeze=False)
    for column, name in enumerate(COUNT_PANELS):
        norm = count_norm(*(getattr(snapshot, name) for snapshot in snapshots.values()))
        for row, label in enumerate(rows):
            snapshot = snapshots[label]
            mapped = draw(axes[row, column], grid, getattr(snapshot, name), norm, "viridis",
                          f"{label}: {TITLES[name]}", colorbar=False)
        _colorbar(fig, mapped, ax=axes[:, column], location="bottom", shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (Agg) and return the path."""
    fig.savefig(path, dpi=110)
    return Path(path)
