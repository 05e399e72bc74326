"""Drawing heatmap snapshots: one run at one moment, and the final heatmaps of several methods side by side.

Counts are drawn on a log scale (SPEC §7), empty cells black and walls grey as in the paper's
figures (gridworld tiles; the point and ant mazes' wall cells in the goal plane, drawn under the
counts and the evaluation's success, over V and the score, which are defined inside walls too);
V(s₀, g) on a linear [0, 1] scale; the selection score on a log scale where it is positive; the
goal-reaching evaluation's success per goal from red (0) to green (1). s₀ is marked with a white star. Figures are built with matplotlib's object API on the
Agg canvas: no pyplot, no global backend, nothing shown.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PatchCollection
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.snapshot import COUNT_PANELS, HeatmapSnapshot

TITLES = {"visits": "visits in D", "selected": "goals selected", "reached": "goals reached",
          "values": "V(s₀, g)", "scores": "selection score", "eval": "eval success"}
_SUCCESS_CMAP = "RdYlGn"
#: Width of a panel's axes in points, for sizing the evaluation's goal markers (the figures' panels are ~3 in wide).
_AXES_POINTS = 160.0
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


def _draw_walls(ax, grid: GoalGrid, over: bool) -> None:
    """The maze's wall rectangles on a bins panel: under the image (its empty cells transparent) or over it."""
    ax.set_facecolor(_EMPTY)
    rects = [Rectangle((x, y), w, h) for x, y, w, h in grid.walls]
    ax.add_collection(PatchCollection(rects, facecolor=_WALL_RGBA, edgecolor="none", zorder=2 if over else 0.5))
    x0, x1, y0, y1 = grid.extent
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)


def draw(ax, grid: GoalGrid, image: np.ndarray, norm, cmap: str, title: str,
         start: tuple[float, float] | None = None, colorbar: bool = True, walls_over: bool = False):
    """One heatmap panel on ``ax``: ``image`` ``[rows, cols]`` over ``grid`` (NaN and, under a log norm, 0: empty).

    A maze's walls (``grid.walls``) go under the image, whose empty cells then show them, or over it
    (``walls_over``: images defined inside walls too, V and the score).

    Returns the image's mappable (for a colour bar shared by several panels).
    """
    shown = np.array(image, dtype=float)
    if isinstance(norm, LogNorm):
        shown[shown <= 0] = np.nan
    see_through = bool(grid.walls) and not grid.tiles
    colours = matplotlib.colormaps[cmap].with_extremes(bad=(0, 0, 0, 0) if see_through else _EMPTY)
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
                           interpolation="nearest", zorder=1)
        if see_through:
            _draw_walls(ax, grid, walls_over)
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


def draw_success(ax, grid: GoalGrid, points: np.ndarray, success: np.ndarray, title: str, colorbar: bool = True):
    """The evaluation's success per goal position on ``ax``: tiles coloured on gridworlds, a square per goal position
    elsewhere (over the maze's walls). Returns the mappable."""
    norm = Normalize(0.0, 1.0)
    if grid.tiles:
        image = np.full(grid.shape, np.nan)
        image[points[:, 1].astype(int), points[:, 0].astype(int)] = success
        return draw(ax, grid, image, norm, _SUCCESS_CMAP, title, colorbar=colorbar)
    if grid.walls:
        _draw_walls(ax, grid, over=False)
    else:
        ax.set_facecolor(_EMPTY)
        x0, x1, y0, y1 = grid.extent
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
    xs = np.unique(points[:, 0])
    gaps = np.diff(xs)
    span = grid.high[0] - grid.low[0]
    cell = float(gaps.min()) if gaps.size else span / 20
    size = (0.8 * cell / span * _AXES_POINTS) ** 2
    mapped = ax.scatter(points[:, 0], points[:, 1], c=success, cmap=_SUCCESS_CMAP, norm=norm, marker="s", s=size,
                        edgecolors="none", zorder=3)
    ax.set_aspect("auto")
    ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=8)
    if colorbar:
        _colorbar(ax.figure, mapped, ax=ax, fraction=0.046, pad=0.04)
    return mapped


def _eval_title(snapshot: HeatmapSnapshot) -> str:
    mean = float(np.mean(snapshot.eval_success)) if snapshot.eval_success.size else 0.0
    return f"{TITLES['eval']} (mean {mean:.2f},\nat {snapshot.eval_frames} env frames)"


def _score_norm(scores: np.ndarray):
    finite = scores[np.isfinite(scores)]
    if finite.size and finite.min() > 0:
        top = float(finite.max())
        return LogNorm(vmin=max(float(finite.min()), top * 1e-4), vmax=top if top > 0 else 1.0)
    return Normalize()


def snapshot_figure(grid: GoalGrid, snapshot: HeatmapSnapshot, title: str) -> Figure:
    """One run at one moment: visits, goals selected and reached, and where they apply V(s₀, g) and the score."""
    panels = [name for name in (*COUNT_PANELS, "values", "scores") if getattr(snapshot, name) is not None]
    if snapshot.eval_points is not None:
        panels.append("eval")
    fig = Figure(figsize=(3.1 * len(panels), 3.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    window = "since the last snapshot"
    for ax, name in zip(axes, panels):
        image = getattr(snapshot, name, None)
        if name in COUNT_PANELS:
            label = TITLES[name] + ("" if name == "visits" else f"\n({window}: {int(image.sum())})")
            draw(ax, grid, image, count_norm(image), "viridis", label)
        elif name == "values":
            draw(ax, grid, image, Normalize(0.0, 1.0), "magma", TITLES[name], snapshot.start, walls_over=True)
        elif name == "scores":
            title = f"{TITLES[name]} ({snapshot.selector})"
            draw(ax, grid, image, _score_norm(image), "viridis", title, snapshot.start, walls_over=True)
        else:
            draw_success(ax, grid, snapshot.eval_points, snapshot.eval_success, _eval_title(snapshot))
    if not grid.tiles:
        axes[0].set_xlabel(grid.axis_labels[0], fontsize=7)
        axes[0].set_ylabel(grid.axis_labels[1], fontsize=7)
    fig.suptitle(f"{title}: {snapshot.percent} % of training ({snapshot.frames} env frames)", fontsize=9)
    return fig


def comparison_figure(grid: GoalGrid, snapshots: dict[str, HeatmapSnapshot], title: str) -> Figure:
    """Methods (rows) × visits / goals selected / goals reached (columns), each column on one log colour range
    (the paper's heatmaps share their colour range), and the evaluation's success per goal where a run evaluated."""
    rows = list(snapshots)
    columns = list(COUNT_PANELS) + (["eval"] if any(s.eval_points is not None for s in snapshots.values()) else [])
    fig = Figure(figsize=(3.0 * len(columns), 2.7 * len(rows) + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), len(columns), squeeze=False)
    for column, name in enumerate(columns):
        mapped = None
        norm = count_norm(*(getattr(snapshot, name) for snapshot in snapshots.values())) if name != "eval" else None
        for row, label in enumerate(rows):
            snapshot, ax = snapshots[label], axes[row, column]
            if name != "eval":
                mapped = draw(ax, grid, getattr(snapshot, name), norm, "viridis", f"{label}: {TITLES[name]}",
                              colorbar=False)
            elif snapshot.eval_points is not None:
                mapped = draw_success(ax, grid, snapshot.eval_points, snapshot.eval_success,
                                      f"{label}: {_eval_title(snapshot)}", colorbar=False)
            else:
                ax.set_axis_off()
        if mapped is not None:
            _colorbar(fig, mapped, ax=axes[:, column], location="bottom", shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (Agg) and return the path."""
    fig.savefig(path, dpi=110)
    return Path(path)
