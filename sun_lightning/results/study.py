"""The study report across environments: the paper's summary of a whole study (SPEC §7).

Written by :mod:`sun_lightning.compare` when a study has more than one environment, beside each
environment's own report (:mod:`~sun_lightning.results.report`, in ``<results>/<Env>/``):

- ``study.md``: the relative coverage and entropy AUC improvement of each method over AdaGoal, DISCOVER
  and Random averaged over environments, as the paper's "+15.1 % / +7.6 % over AdaGoal", with 95 % intervals (SUN's
  row again within each of the paper's families of environments, :mod:`~sun_lightning.results.domains`); per
  baseline, rliable's probability that SUN improves on it and the IQM of SUN's normalized AUCs; SUN adaptive against
  each of its ablations and grid variants, with the word its interval allows (beats, ties, loses); then each
  environment's AUCs (mean and 95 % interval over seeds, n) with a link to its report; the paper's runtime table
  (environment × method, minutes) and SUN's speed-ups over AdaGoal and DISCOVER beside the paper's
  (:mod:`~sun_lightning.results.runtime`);
- ``study.csv``: the averaged improvements, a row per method;
- ``curves_grid.png``: coverage and entropy against env frames per environment (a row each), the mean and its
  95 % interval band over seeds: the paper's main-results figure;
- ``auc_bars.png``: each environment's absolute coverage and entropy AUCs per method and their average over the
  environments, LunarLanderFull apart (the paper's AUC figure, :mod:`~sun_lightning.results.auc_bars`);
- ``knn_entropy.png``: LunarLanderFull's k-NN entropy over training, where the study has it;
- ``improvement_bars.png``: the averaged improvements as bars, per baseline.

The average is the paper's (:mod:`~sun_lightning.results.relative`): per environment the AUC of a method is
its mean over seeds; these are averaged over the environments where both the method and the baseline have
one, and the improvement is ``100 · (mean AUC − mean baseline AUC) / mean baseline AUC``. Every average over
environments (improvements, rliable's aggregates, the ablations, the AUC bars) leaves LunarLanderFull out, as the
paper does (SPEC §7).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning.results.auc_bars import auc_bars
from sun_lightning.results.curves import band_figure, label_axes, plot_bands
from sun_lightning.results.domains import DOMAINS, OTHER, averaged, domain_of
from sun_lightning.results.heatmaps import save_png
from sun_lightning.results.intervals import (Interval, averaged_relative_interval, format_interval, normalized_iqm,
                                             probability_of_improvement, verdict)
from sun_lightning.results.labels import NA
from sun_lightning.results.relative import BASELINES
from sun_lightning.results.report import (COVERAGE, ENTROPY, KNN, Stat, csv_key, csv_value, fmt, fmt_percent, label,
                                          summarize, write_csv)
from sun_lightning.results.runs import RunRecord
from sun_lightning.results.runtime import study_lines as runtime_lines
from sun_lightning.tracking.naming import env_name

#: The columns averaged over environments.
AUCS = ("coverage AUC", "entropy AUC")
#: The paper's selection and indicator ablations of SUN adaptive (its Figures 6 and 7).
ABLATIONS = ("sun_per_step", "sun_episodic", "sun_additive", "novelty_only", "reachability_only")

Study = dict[str, dict[str, list[RunRecord]]]
"""env id → method → its finished runs."""


def averaged_relative(summaries: dict[str, dict[str, dict[str, Stat | None]]], methods: Sequence[str]
                      ) -> dict[str, dict[str, Interval | None]]:
    """Method → ``"<metric> AUC vs <baseline>"`` → the improvement averaged over environments with its stratified 95 %
    interval (:func:`~sun_lightning.results.intervals.averaged_relative_interval`; ``None``: n/a).

    Args:
        summaries: env id → :func:`~sun_lightning.results.report.summarize` of its runs.
        methods: the rows, in order.
    """
    baselines = [b for b in BASELINES if any((s.get(b) or {}).get(m) for s in summaries.values() for m in AUCS)]
    out: dict[str, dict[str, Interval | None]] = {}
    for method in methods:
        cells: dict[str, Interval | None] = {}
        for metric in AUCS:
            for baseline in baselines:
                pairs = paired_values(summaries, method, baseline, metric)
                defined = method != baseline and pairs
                cells[f"{metric} vs {label(baseline)}"] = averaged_relative_interval(pairs) if defined else None
        out[method] = cells
    return out


def paired_values(summaries: dict[str, dict[str, dict[str, Stat | None]]], method: str, baseline: str, metric: str
                  ) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per environment where both ran: (the method's per-seed values of ``metric``, the baseline's)."""
    return [(s[method][metric].values, s[baseline][metric].values) for s in summaries.values()
            if (s.get(method) or {}).get(metric) and (s.get(baseline) or {}).get(metric)]


def aggregates(summaries: dict[str, dict[str, dict[str, Stat | None]]], method: str = "sun"
               ) -> dict[str, dict[str, Interval | None]]:
    """rliable's aggregates of ``method`` against each baseline, per AUC: ``"P(improvement)"``, the probability that
    a run of it beats a run of the baseline on the same environment, averaged over environments
    (:func:`~sun_lightning.results.intervals.probability_of_improvement`), and ``"IQM normalized"``, the IQM over all
    its runs of each run's AUC over the baseline's mean AUC on that environment (1: the baseline;
    :func:`~sun_lightning.results.intervals.normalized_iqm`); each with its stratified 95 % interval.

    Returns:
        ``"<metric> vs <baseline>"`` → ``{"P(improvement)": …, "IQM normalized": …}``; empty where ``method`` did not run.
    """
    out: dict[str, dict[str, Interval | None]] = {}
    for baseline in BASELINES:
        if baseline == method:
            continue
        for metric in AUCS:
            pairs = paired_values(summaries, method, baseline, metric)
            if pairs:
                out[f"{metric} vs {label(baseline)}"] = {
                    "envs": len(pairs), "P(improvement)": probability_of_improvement(pairs),
                    "IQM normalized": normalized_iqm([(own, float(np.mean(base))) for own, base in pairs])}
    return out


def curves_grid(study: Study, title: str) -> Figure:
    """A row per environment, a column per metric (coverage, entropy): each method's mean and 95 % interval over seeds."""
    metrics = {COVERAGE: "coverage", ENTROPY: "entropy"}
    methods = list(dict.fromkeys(m for runs in study.values() for m in runs))
    colors = {label(m): f"C{i % 10}" for i, m in enumerate(methods)}
    fig = Figure(figsize=(4.0 * len(metrics), 2.4 * len(study) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(study), len(metrics), squeeze=False)
    for row, (env_id, runs) in zip(axes, study.items()):
        by_method = {label(m): {metric: [r.histories[metric] for r in records if metric in r.histories]
                                for metric in metrics} for m, records in runs.items() if records}
        for ax, (metric, name) in zip(row, metrics.items()):
            plot_bands(ax, by_method, metric, colors)
            label_axes(ax, f"{env_name(env_id)}: {name}", metric)
    handles = {h.get_label().split(" (n = ")[0]: h for ax in axes.flat for h in ax.get_lines()}
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(len(handles), 5),
               fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


#: LunarLanderFull's k-NN entropy over training, beside study.md.
KNN_FIGURE = "knn_entropy.png"


def knn_curves(study: Study) -> Figure:
    """LunarLanderFull's k-NN entropy against env frames per method, mean and 95 % interval over seeds (the paper
    reports only this entropy there: its 8-D goals defeat binning)."""
    runs = next(runs for env_id, runs in study.items() if env_name(env_id) == "LunarLanderFull")
    by_method = {label(m): {KNN: [r.histories[KNN] for r in records if KNN in r.histories]}
                 for m, records in runs.items() if records}
    return band_figure(by_method, {KNN: "k-NN entropy (nats)"}, "LunarLanderFull: k-NN entropy, mean and 95 % CI "
                       "over seeds")


def improvement_bars(relative: dict[str, dict[str, Interval | None]], title: str) -> Figure:
    """A panel per metric; per baseline a group of bars, one per method, with its 95 % interval as an error bar (n/a
    cells are left out)."""
    columns = list(next(iter(relative.values()), {}))
    baselines = list(dict.fromkeys(c.split(" vs ", 1)[1] for c in columns))
    methods = [m for m, row in relative.items() if any(v is not None for v in row.values())]
    fig = Figure(figsize=(4.4 * len(AUCS), 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(AUCS), squeeze=False)[0]
    width = 0.8 / max(len(methods), 1)
    for ax, metric in zip(axes, AUCS):
        for i, method in enumerate(methods):
            values = [relative[method].get(f"{metric} vs {b}") for b in baselines]
            shown = [v for v in values if v is not None]
            x = [j + (i - (len(methods) - 1) / 2) * width for j, v in enumerate(values) if v is not None]
            errors = np.array([[v.value - v.low, v.high - v.value] if v.low is not None else [0.0, 0.0]
                               for v in shown]).reshape(-1, 2).T
            ax.bar(x, [v.value for v in shown], width, yerr=errors, capsize=2, label=label(method), color=f"C{i % 10}")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(baselines)), [f"vs {b}" for b in baselines], fontsize=8)
        ax.set_ylabel(f"{metric} improvement (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def family_lines(summaries, columns: Sequence[str], method: str = "sun") -> list[str]:
    """SUN adaptive's row of the averaged improvements again within each of the paper's families of environments
    (:data:`~sun_lightning.results.domains.DOMAINS`), where the study spans more than one: the paper's families
    differ in what is hard (exact tiles, unbounded states), and a family's average is not hidden by another's."""
    order, families = [*DOMAINS, OTHER], {}
    for env_id in sorted(summaries, key=lambda e: order.index(domain_of(e))):
        families.setdefault(domain_of(env_id), {})[env_id] = summaries[env_id]
    rows = []
    for family, part in families.items():
        envs = sum(1 for summary in part.values() if summary.get(method))
        if envs:
            row = averaged_relative(part, [method])[method]
            rows.append(f"| {family} | {envs} | " + " | ".join(fmt_percent(row.get(c)) for c in columns) + " |")
    if len(families) < 2 or not rows:
        return []
    return ["", f"{label(method)} by family of environments (the paper's §5: {', '.join(DOMAINS)}), averaged as above "
            "within each:", "", "| family | envs | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|",
            *rows]


def aggregate_lines(summaries) -> list[str]:
    """The section of :func:`aggregates`: SUN against each baseline across environments (none where SUN did not run)."""
    table = aggregates(summaries)
    if not table:
        return []
    lines = ["", "## SUN against each baseline across environments", "",
             "rliable's aggregates (Agarwal et al., 2021): P(improvement), the probability that a SUN run has the higher "
             "AUC than a baseline run on the same environment (ties count ½), averaged over the environments where "
             "both ran; IQM normalized, the interquartile mean over SUN's runs of each run's AUC divided by the "
             "baseline's mean AUC on its environment (1.0: the baseline's). In brackets the 95 % stratified bootstrap "
             "interval. P(improvement) above 0.5 with an interval that excludes 0.5 is an improvement.", "",
             "| AUC vs baseline | envs | P(improvement) | IQM normalized |", "|---|---|---|---|"]
    for column, cells in table.items():
        lines.append(f"| {column} | {cells['envs']} | " + " | ".join(
            format_interval(cells[k], 3) for k in ("P(improvement)", "IQM normalized")) + " |")
    return lines


def variants_of_sun(methods: Sequence[str]) -> list[str]:
    """The study's methods that change one part of SUN adaptive: its selection and indicator ablations
    (:data:`ABLATIONS`) and grid variants of its settings (``rho=0.5``, ``counts=binned``)."""
    return [m for m in methods if m in ABLATIONS or "=" in m]


def ablation_lines(summaries, methods: Sequence[str]) -> list[str]:
    """The section on SUN adaptive against each of its ablations and variants, as the paper's ablation claims are read:
    SUN's relative AUC improvement over it averaged over environments, its interval and what it says."""
    rows = []
    for variant in variants_of_sun(methods):
        cells = []
        for metric in AUCS:
            pairs = paired_values(summaries, "sun", variant, metric)
            change = averaged_relative_interval(pairs) if pairs else None
            cells.append(NA if change is None else f"{fmt_percent(change)}: SUN {verdict(change)}")
        envs = len(paired_values(summaries, "sun", variant, AUCS[0]))
        rows.append(f"| {label(variant)} | {envs} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "## SUN adaptive against its ablations and variants", "",
            "SUN adaptive's relative AUC improvement over each (as the table above, SUN in the place of the method and "
            "the ablation in the baseline's): above 0 SUN does better. \"beats\" or \"loses\" where the 95 % interval "
            "excludes 0, else \"ties\".", "",
            "| SUN adaptive against | envs | " + " | ".join(AUCS) + " |", "|---|---|---|---|", *rows]


def markdown(study: Study, summaries, relative, context: Sequence[str], reports: dict[str, str],
             figures: Sequence[tuple[str, str]], failed: Sequence[str]) -> str:
    """``study.md``: the averaged improvements, the AUCs per environment, the figures and the failed runs."""
    columns = list(next(iter(relative.values()), {}))
    counted = averaged(summaries)
    apart = [env_name(env_id) for env_id in summaries if env_id not in counted]
    lines = [f"# Study: exploration across {len(study)} environments", "", *context, ""]
    if columns:
        lines += ["## Relative AUC improvement, averaged over environments", "",
                  "100 · (AUC − AUC of the baseline) / AUC of the baseline, each AUC averaged over the environments "
                  "where both ran (per environment: the mean over seeds), as the paper's table "
                  "(`sun_lightning/results/study.py`); in brackets its 95 % stratified bootstrap interval (each "
                  "environment's seeds of each method resampled on their own; `sun_lightning/results/intervals.py`), "
                  "then the seeds of each sample. An interval that excludes 0 is a win or a loss; one that holds 0 a tie."
                  + (f" {', '.join(apart)}: not in this or any average below, as in the paper (its binned coverage and "
                     "entropy are degenerate; its own numbers are under Per environment)." if apart else ""),
                  "",
                  "| method | envs | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
        for method, row in relative.items():
            envs = sum(1 for env_id in counted if study[env_id].get(method))
            lines.append(f"| {label(method)} | {envs} | " + " | ".join(fmt_percent(row[c]) for c in columns) + " |")
        lines += family_lines(counted, columns)
    else:
        lines.append("Relative AUC improvement: n/a (none of the baselines AdaGoal, DISCOVER, Random finished).")
    lines += aggregate_lines(counted)
    lines += ablation_lines(counted, list(dict.fromkeys(m for runs in study.values() for m in runs)))
    lines += runtime_lines(study)
    lines += ["", "## Per environment", "",
              "Mean over seeds, [95 % bootstrap interval], (n = seeds); n = 1: no interval.", "",
              "| environment | method | n | coverage AUC | entropy AUC | coverage | entropy |",
              "|---|---|---|---|---|---|---|"]
    for env_id, runs in study.items():
        link = f"[{env_name(env_id)}]({reports[env_id]})" if env_id in reports else env_name(env_id)
        for method, records in runs.items():
            row = summaries[env_id][method]
            lines.append(f"| {link} | {label(method)} | {len(records)} | " + " | ".join(
                fmt(row.get(c)) for c in ("coverage AUC", "entropy AUC", "coverage", "entropy")) + " |")
    for title, path in figures:
        lines += ["", f"![{title}]({path})"]
    if failed:
        lines += ["", "Runs that failed (not in the tables): " + ", ".join(failed)]
    return "\n".join(lines) + "\n"


def write_study(out_dir: str | Path, study: Study, context: Sequence[str] = (), reports: dict[str, str] | None = None,
                failed: Sequence[str] = (), kept: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """Write ``study.md``, ``study.csv``, ``curves_grid.png``, ``auc_bars.png``, ``improvement_bars.png`` and (with
    LunarLanderFull's k-NN entropy) ``knn_entropy.png`` into ``out_dir``.

    Args:
        study: env id → method → its finished runs (rows and panels in this order).
        context: Markdown lines under the title.
        reports: env id → the path of its report, relative to ``out_dir`` (linked).
        failed: names of the runs that failed.
        kept: (title, file name) of curve figures already in ``out_dir``, shown first and not drawn again (a study
            restated from its ``runs.csv``, whose runs have no histories: :mod:`~sun_lightning.results.restate`).

    Returns:
        The files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries = {env_id: summarize(runs) for env_id, runs in study.items()}
    methods = list(dict.fromkeys(m for runs in study.values() for m in runs))
    relative = averaged_relative(averaged(summaries), methods)
    written, figures = [], list(kept)
    if not kept and any(records for runs in study.values() for records in runs.values()):
        written.append(save_png(curves_grid(study, "coverage and entropy per environment: mean and 95 % CI over seeds"),
                                out / "curves_grid.png"))
        figures.append(("coverage and entropy per environment", "curves_grid.png"))
    if any(records for runs in study.values() for records in runs.values()):
        written.append(save_png(auc_bars(study, {COVERAGE: "coverage AUC", ENTROPY: "entropy AUC"},
                                         "AUC per environment and averaged (LunarLanderFull apart), 95 % CI"),
                                out / "auc_bars.png"))
        figures.append(("absolute AUCs with the average over environments", "auc_bars.png"))
        if KNN_FIGURE not in dict(kept).values() and any(
               KNN in r.histories for env_id, runs in study.items() if env_name(env_id) == "LunarLanderFull"
               for records in runs.values() for r in records):
            written.append(save_png(knn_curves(study), out / KNN_FIGURE))
            figures.append(("LunarLanderFull: k-NN entropy over training", KNN_FIGURE))
    if any(v is not None for row in relative.values() for v in row.values()):
        written.append(save_png(improvement_bars(relative, "relative AUC improvement, averaged over environments"),
                                out / "improvement_bars.png"))
        figures.append(("relative AUC improvement over the baselines", "improvement_bars.png"))
    report = out / "study.md"
    report.write_text(markdown(study, summaries, relative, context, reports or {}, figures, failed))
    rows = []
    for method, row in relative.items():
        record = {"method": method, "envs": sum(1 for env_id in averaged(study) if study[env_id].get(method))}
        for column, v in row.items():
            key = csv_key(column) + "_pct"
            record[key] = csv_value(None if v is None else v.value)
            record[f"{key}_ci_low"] = csv_value(None if v is None else v.low)
            record[f"{key}_ci_high"] = csv_value(None if v is None else v.high)
        rows.append(record)
    written += [report, write_csv(out / "study.csv", rows)]
    return written
