"""Exploration curves against env frames (SPEC §7): one run's, and several methods' with a band over seeds.

The paper plots coverage and entropy against training steps with a band over seeds (its Figure
"Main results": "means (thick lines) with 95 % confidence intervals (shaded areas)"); here too: each frame's mean over
seeds and its percentile-bootstrap interval (:func:`~sun_lightning.results.intervals.pointwise_mean_interval`; one seed:
no band, two: their range).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning.results.intervals import pointwise_mean_interval

#: The curves drawn, and their axis labels. ``knn_entropy`` where the run computes it (``metrics.knn_entropy``,
#: LunarLanderFull), at every log; ``eval/success`` where the run evaluated goal reaching
#: (:mod:`sun_lightning.metrics.evaluation`).
CURVES = {"explore/visits/coverage": "coverage", "explore/visits/entropy": "entropy",
          "explore/visits/knn_entropy": "k-NN entropy", "eval/success": "eval success"}

#: The goal statistics drawn across methods (the report's ``goal_curves.png``): what the paper's appendix tracks over
#: training beside coverage (each a window's value, docs/tracking.md).
GOAL_CURVES = {"explore/goals/success": "goal success", "explore/goals/steps_to_goal": "steps to goal",
               "explore/goals/reselection_rate": "reselection rate",
               "explore/goals/random_fraction": "random fraction"}

#: Curves that are rates, drawn on their whole range: a flat eval success of 0.048 (the start cell only) on an
#: axis of its own would fill the panel like a rising curve.
RATES = {"eval/success": (-0.02, 1.02), "explore/goals/success": (-0.02, 1.02),
         "explore/goals/reselection_rate": (-0.02, 1.02), "explore/goals/random_fraction": (-0.02, 1.02)}

Curve = tuple[Sequence[float], Sequence[float]]


def run_curves_figure(histories: dict[str, Curve], title: str) -> Figure:
    """One panel per metric of ``histories`` (name → (env frames, values)), in :data:`CURVES` order."""
    names = [name for name in CURVES if histories.get(name) and len(histories[name][0])]
    fig = Figure(figsize=(3.6 * max(len(names), 1), 2.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(names), 1), squeeze=False)[0]
    for ax, name in zip(axes, names):
        steps, values = histories[name]
        ax.plot(steps, values, marker="o" if len(steps) < 3 else None, markersize=4)
        label_axes(ax, CURVES[name], name)
    fig.suptitle(title, fontsize=9)
    return fig


def seed_band(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Mean over seeds of curves logged at possibly different frames, and each frame's 95 % interval.

    Every curve is interpolated linearly onto the frames of the first one, within the range all of
    them span (a seed that stopped earlier shortens the band rather than being extrapolated).

    Returns:
        ``(frames, mean, low, high)``; ``low`` and ``high`` are ``None`` for a single curve (no interval).
    """
    if not curves:
        raise ValueError("no curves")
    ordered = []
    for steps, values in curves:
        order = np.argsort(steps)
        ordered.append((np.asarray(steps, dtype=float)[order], np.asarray(values, dtype=float)[order]))
    lo = max(s[0] for s, _ in ordered)
    hi = min(s[-1] for s, _ in ordered)
    frames = ordered[0][0][(ordered[0][0] >= lo) & (ordered[0][0] <= hi)]
    stacked = np.stack([np.interp(frames, s, v) for s, v in ordered])
    mean, low, high = pointwise_mean_interval(stacked)
    return frames, mean, low, high


def band_figure(by_method: dict[str, dict[str, Sequence[Curve]]], metrics: dict[str, str], title: str) -> Figure:
    """One panel per metric; per method a line (the mean over seeds) and its 95 % interval band.

    Args:
        by_method: method label → metric name → the seeds' curves.
        metrics: metric name → axis label.
        title: the figure's title.
    """
    fig = Figure(figsize=(4.2 * len(metrics), 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, (name, label) in zip(axes, metrics.items()):
        plot_bands(ax, by_method, name)
        label_axes(ax, label, name)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_bands(ax, by_method: dict[str, dict[str, Sequence[Curve]]], metric: str,
               colors: dict[str, str] | None = None) -> None:
    """Draw on ``ax`` each method's mean curve of ``metric`` over seeds with its 95 % interval band.

    Args:
        by_method: method label → metric name → the seeds' curves.
        colors: method label → colour, so that a method keeps its colour across panels (matplotlib's cycle
            otherwise).
    """
    for method, per_metric in by_method.items():
        curves = per_metric.get(metric) or []
        if not curves:
            continue
        frames, mean, low, high = seed_band(curves)
        line, = ax.plot(frames, mean, label=f"{method} (n = {len(curves)})", color=(colors or {}).get(method))
        if low is not None:
            ax.fill_between(frames, low, high, color=line.get_color(), alpha=0.2, linewidth=0)


def label_axes(ax, name: str, metric: str | None = None) -> None:
    """An env-frames x axis and a ``name`` y axis, in the reports' style; a rate's (:data:`RATES`) whole range."""
    if metric in RATES:
        ax.set_ylim(*RATES[metric])
    ax.set_xlabel("env frames", fontsize=8)
    ax.set_ylabel(name, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
