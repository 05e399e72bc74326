"""Absolute coverage and entropy AUCs per environment and method, with the paper's average over environments.

The paper's Figure "sun_all_relative_improvement" (left) shows the "Area under the curve (AUC) for entropy and
coverage across all baselines and SUN versions, averaged over all environments (excluding LunarLander(Full))": 13 of
its 14. Here each environment's bars are the methods' mean AUC over seeds with the 95 % interval
(:mod:`~sun_lightning.results.intervals`), and a last group is that average: per method, the mean over the environments
it ran on, LunarLanderFull left out (its binned coverage and entropy are degenerate, the paper's appendix
"LunarLander(Full)"), with a stratified interval over every environment's seeds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning.results.domains import LEFT_OUT
from sun_lightning.results.intervals import Interval, bootstrap_interval, finite, mean_interval
from sun_lightning.results.labels import label
from sun_lightning.results.runs import RunRecord
from sun_lightning.tracking.naming import env_name


Study = dict[str, dict[str, list[RunRecord]]]


def env_average(per_env: Sequence[Sequence[float | None]]) -> Interval | None:
    """The mean over environments of each environment's mean over seeds, with its stratified 95 % interval.

    Args:
        per_env: per environment, the method's per-seed values (empty ones are left out).
    """
    samples = [finite(values) for values in per_env]
    samples = [s for s in samples if s.size]
    if not samples:
        return None
    return bootstrap_interval(samples, lambda *arrays: np.mean([a.mean(axis=-1) for a in arrays], axis=0))


def auc_table(study: Study, metric: str) -> dict[str, dict[str, Interval | None]]:
    """Method → environment name (and ``"average (<n> envs)"``) → its mean AUC with the 95 % interval.

    Args:
        study: env id → method → its finished runs.
        metric: the logged curve (``explore/visits/coverage`` or ``.../entropy``).
    """
    methods = list(dict.fromkeys(m for runs in study.values() for m in runs))
    out: dict[str, dict[str, Interval | None]] = {}
    for method in methods:
        row = {env_name(env_id): mean_interval([r.auc(metric) for r in runs.get(method, [])])
               for env_id, runs in study.items()}
        kept = [[r.auc(metric) for r in runs.get(method, [])] for env_id, runs in study.items()
                if env_name(env_id) not in LEFT_OUT and runs.get(method)]
        row[f"average ({len(kept)} envs)"] = env_average(kept)
        out[method] = row
    return out


def auc_bars(study: Study, metrics: dict[str, str], title: str) -> Figure:
    """A panel per metric (name → axis label); per environment, and for the average, a bar per method at its mean
    AUC with its 95 % interval as an error bar (one seed: no error bar)."""
    fig = Figure(figsize=(max(6.0, 0.9 * (len(study) + 1) * 1.6), 3.0 * len(metrics)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, (metric, name) in zip(axes, metrics.items()):
        table = auc_table(study, metric)
        groups = list(next(iter(table.values()), {}))
        width = 0.8 / max(len(table), 1)
        for i, (method, row) in enumerate(table.items()):
            cells = [(j, row[g]) for j, g in enumerate(groups) if row.get(g) is not None]
            x = [j + (i - (len(table) - 1) / 2) * width for j, _ in cells]
            errors = np.array([[c.value - c.low, c.high - c.value] if c.low is not None else [0.0, 0.0]
                               for _, c in cells]).reshape(-1, 2).T
            ax.bar(x, [c.value for _, c in cells], width, yerr=errors, capsize=2, label=label(method),
                   color=f"C{i % 10}")
        if groups:
            ax.axvline(len(groups) - 1.5, color="grey", linewidth=0.6)  # the average apart from the environments
        ax.set_xticks(range(len(groups)), groups, fontsize=7, rotation=20, ha="right")
        ax.set_ylabel(name, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7, ncols=min(len(study) and 5, 5))
    fig.suptitle(title, fontsize=10)
    return fig
