"""The comparison report of one environment: tables, curves and heatmaps of methods × seeds (SPEC §7).

Written by the comparison runner (:mod:`sun_lightning.compare`) into a results folder and onto the
comparison's parent MLflow run:

- ``report.md``: final coverage and entropy, their AUCs (and k-NN entropy where logged), goal
  success, the final goal-reaching evaluation's success where the runs evaluated, as the mean over seeds with its 95 %
  bootstrap interval and n (:mod:`~sun_lightning.results.intervals`, the paper's statistics); the relative AUC
  improvement of each method over AdaGoal, DISCOVER and Random as in the paper's table, with its interval (:mod:`~sun_lightning.results.relative`); what the runs did
  at the end (:data:`SIGNALS`: episode reach, unmoved steps, action saturation, eval distance, steps to goal, reselection rate,
  Q), the diagnosis of a loss;
- ``summary.csv`` (a row per method) and ``runs.csv`` (a row per run): the same numbers;
- ``runs.json.gz`` and ``snapshots/``: the runs themselves, histories and shown snapshots, from which the report can be
  drawn again without the MLflow store (:mod:`~sun_lightning.results.archive`);
- ``curves.png``: coverage and entropy (and eval success, where evaluated) against env frames, the mean and its 95 %
  interval band over seeds;
- ``heatmaps.png``: each method's final heatmaps (its lowest finished seed), one colour scale per column.
- ``svf.png`` and ``pseudocount_radii.png``, where the runs' final checkpoints are at hand: drawn from them
  (:mod:`~sun_lightning.results.checkpoint_figures`) and listed with the others.

With one seed a cell is the value and "n = 1", no interval; with two the interval is the seeds' range; a metric that
does not apply (goal success of Random, a baseline that was not run) reads ``n/a``, never 0.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sun_lightning.results.archive import write_archive
from sun_lightning.results.curves import GOAL_CURVES, band_figure
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.goal_stages import goal_stages_figure
from sun_lightning.results.heatmaps import comparison_figure, save_png
from sun_lightning.results.intervals import Interval, finite, format_interval, mean_interval, relative_interval
from sun_lightning.results.labels import NA, label
from sun_lightning.results.relative import BASELINES
from sun_lightning.results.runs import RunRecord
from sun_lightning.results.runtime import hardware_line, report_lines as runtime_lines
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.tracking.naming import env_name

COVERAGE, ENTROPY = "explore/visits/coverage", "explore/visits/entropy"
KNN, SUCCESS = "explore/visits/knn_entropy", "explore/goals/success"
EVAL_SUCCESS = "eval/success"
#: What a run did in its last logging window, for a diagnosis where a method loses: how far the
#: goal-conditioned policy gets from the evaluation goals, how long its own goals take, how often it reselects.
SIGNALS = {"explore/episodes/reach": "episode reach", "explore/actions/unmoved": "unmoved steps",
           "explore/actions/saturation": "action saturation",
           "eval/final_distance": "eval final distance", "eval/steps_to_goal": "eval steps to goal",
           "explore/goals/steps_to_goal": "steps to goal", "explore/goals/reselection_rate": "reselection rate",
           "explore/goals/rule_fired": "rule fired", "explore/goals/held_unmoved": "held unmoved",
           "explore/goals/cutoff": "MEGA cutoff", "explore/goals/viable": "MEGA viable",
           "train/q/taken": "Q(s, a, g)"}

#: What a report's cells are (the line under its title).
CELLS = ("Cells: mean over the n seeds that finished, [its 95 % bootstrap interval], (n = seeds; n = 1: the value alone, "
         "no interval; n = 2: the interval is the two seeds' range); AUC: the curve's mean height against env frames "
         "(SPEC §7); n/a: does not apply (goal statistics of a rule without goals, a baseline against itself) or no run.")
RELATIVE_TITLE = ("Relative AUC improvement (%) as in the paper's table (its Figure \"Relative AUC improvement of each "
                  "SUN version\"): 100 · (AUC − AUC of the baseline) / AUC of the baseline, on the means over seeds "
                  "(`sun_lightning/results/relative.py`), with its 95 % bootstrap interval over both methods' seeds and "
                  "their n (`sun_lightning/results/intervals.py`). An interval that excludes 0 is a win or a loss; one "
                  "that holds 0 is a tie. A baseline of one seed is held at its value.")
RELATIVE_NA = "Relative AUC improvement: n/a (none of the baselines AdaGoal, DISCOVER, Random finished)."


@dataclass(frozen=True)
class Stat:
    """A column over seeds: the mean, its 95 % interval (:mod:`~sun_lightning.results.intervals`; ``None`` for one
    seed), the sample std (``None`` for one seed; kept in the CSVs), n, and the per-seed values (for intervals of
    differences and improvements)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    std: float | None = None
    values: tuple[float, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat | None:
        """The statistic of the values that exist; ``None`` if none does (the metric does not apply)."""
        interval = mean_interval(values)
        if interval is None:
            return None
        kept = finite(values)
        return cls(interval.value, interval.low, interval.high, interval.n[0],
                   float(kept.std(ddof=1)) if kept.size > 1 else None, tuple(kept.tolist()))

    @property
    def interval(self) -> Interval:
        return Interval(self.mean, self.low, self.high, (self.n,))

    def format(self, digits: int = 3) -> str:
        """``0.135 [0.129, 0.141] (n = 3)``; one seed ``0.135 (n = 1)`` (:func:`~sun_lightning.results.intervals.format_interval`)."""
        return format_interval(self.interval, digits)


def fmt(stat: Stat | None, digits: int = 3) -> str:
    return NA if stat is None else stat.format(digits)


def fmt_percent(value: Interval | float | None) -> str:
    """An improvement in percent with its interval and seeds (``+23.5 % [+14.0, +33.1] (n = 3 / 3)``)."""
    if isinstance(value, Interval):
        return format_interval(value, 1, " %", signed=True)
    return NA if value is None else f"{value:+.1f} %"


# ---- the numbers ----------------------------------------------------------------------------------
def run_values(record: RunRecord) -> dict[str, float | None]:
    """One run's reported numbers (column → value; ``None``: does not apply)."""
    goals = record.goals_selected > 0  # a rule that never drew a goal has no goal statistics
    return {
        "coverage": record.final.get(COVERAGE),
        "entropy": record.final.get(ENTROPY),
        "coverage AUC": record.auc(COVERAGE),
        "entropy AUC": record.auc(ENTROPY),
        "k-NN entropy": record.final.get(KNN),
        "goal success": record.final.get(SUCCESS) if goals else None,
        "eval success": record.final.get(EVAL_SUCCESS),
    }


def summarize(runs: dict[str, list[RunRecord]]) -> dict[str, dict[str, Stat | None]]:
    """Method → column → statistic over its seeds (``None``: n/a); k-NN entropy where a run logged it."""
    return summarize_values({method: [run_values(record) for record in records] for method, records in runs.items()})


def summarize_values(values: dict[str, list[dict[str, float | None]]]) -> dict[str, dict[str, Stat | None]]:
    """:func:`summarize` of the runs' numbers (method → a :func:`run_values` dict per seed), wherever they come from:
    MLflow, or a report's ``runs.csv`` (:mod:`~sun_lightning.results.restate`)."""
    columns = ["coverage", "entropy", "coverage AUC", "entropy AUC", "k-NN entropy", "goal success", "eval success"]
    for optional in ("k-NN entropy", "eval success"):  # columns of runs that logged them
        if not any(v[optional] is not None for rows in values.values() for v in rows):
            columns.remove(optional)
    return {method: {column: Stat.of([v[column] for v in rows]) for column in columns}
            for method, rows in values.items()}


def signals(runs: dict[str, list[RunRecord]]) -> dict[str, dict[str, Stat | None]]:
    """Method → :data:`SIGNALS` column → its final value over seeds (``None``: not logged); columns no run logged
    are left out. Goal statistics of a rule that drew no goal are n/a, as in :func:`summarize`."""
    columns = {name: title for name, title in SIGNALS.items()
               if any(name in r.final for records in runs.values() for r in records)}
    goal_only = ("explore/goals/steps_to_goal", "explore/goals/reselection_rate", "explore/goals/rule_fired",
                 "explore/goals/held_unmoved")
    return {method: {title: Stat.of([r.final.get(name) for r in records
                                     if r.goals_selected > 0 or name not in goal_only])
                     for name, title in columns.items()}
            for method, records in runs.items()}


def relative_table(summary: dict[str, dict[str, Stat | None]]) -> dict[str, dict[str, Interval | None]]:
    """Method → ``"<metric> AUC vs <baseline>"`` → relative improvement in percent with its 95 % interval over both
    methods' seeds (:func:`~sun_lightning.results.intervals.relative_interval`; ``None``: n/a), over the
    baselines of :data:`~sun_lightning.results.relative.BASELINES` that were run."""
    baselines = [b for b in BASELINES if any(stat is not None for stat in summary.get(b, {}).values())]
    out = {}
    for method, row in summary.items():
        cells = {}
        for metric in ("coverage AUC", "entropy AUC"):
            for baseline in baselines:
                own, base = row.get(metric), summary[baseline].get(metric)
                defined = method != baseline and own is not None and base is not None
                cells[f"{metric} vs {label(baseline)}"] = relative_interval(own.values, base.values) if defined else None
        out[method] = cells
    return out


# ---- the files ---------------------------------------------------------------------------------------
def markdown(env_id: str, runs: dict[str, list[RunRecord]], summary, relative, context: Sequence[str],
             figures: Sequence[tuple[str, str]], failed: Sequence[str]) -> str:
    """``report.md``: the summary table, the relative-improvement table, the figures and the failed runs."""
    counts = {method: len(records) for method, records in runs.items()}
    frames = {method: min((r.frames for r in records), default=0) for method, records in runs.items()}
    lines = [f"# {env_name(env_id)}: exploration by method", "", *context, *hardware_line(runs), "",
             *summary_lines(summary, counts, frames), "", *relative_lines(relative)]
    diagnosis = signals(runs)
    sig_columns = list(next(iter(diagnosis.values()), {}))
    if sig_columns:
        lines += ["", "What the runs did (their last logging window; `docs/tracking.md` defines each metric): where a "
                  "method loses, these say whether its policy reaches goals at all.", "",
                  "| method | " + " | ".join(sig_columns) + " |", "|---" * (len(sig_columns) + 1) + "|"]
        for method, row in diagnosis.items():
            lines.append(f"| {label(method)} | " + " | ".join(fmt(row[c]) for c in sig_columns) + " |")
    lines += runtime_lines(runs)
    for title, path in figures:
        lines += ["", f"![{title}]({path})"]
    if failed:
        lines += ["", "Runs that failed (not in the tables): " + ", ".join(failed)]
    return "\n".join(lines) + "\n"


def summary_lines(summary: dict[str, dict[str, Stat | None]], counts: dict[str, int],
                  frames: dict[str, int]) -> list[str]:
    """The summary table: a row per method, its seeds (``counts``), its fewest env frames, each column's statistic."""
    columns = list(next(iter(summary.values()), {}))
    lines = ["| method | n | frames | " + " | ".join(columns) + " |", "|---" * (len(columns) + 3) + "|"]
    for method, row in summary.items():
        lines.append(f"| {label(method)} | {counts[method]} | {frames[method]} | "
                     + " | ".join(fmt(row[c]) for c in columns) + " |")
    return lines


def relative_lines(relative: dict[str, dict[str, Interval | None]]) -> list[str]:
    """The relative AUC improvement: its definition, then a row per method and a column per metric and baseline."""
    columns = list(next(iter(relative.values()), {}))
    if not columns:
        return [RELATIVE_NA]
    lines = [RELATIVE_TITLE, "", "| method | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for method, row in relative.items():
        lines.append(f"| {label(method)} | " + " | ".join(fmt_percent(row[c]) for c in columns) + " |")
    return lines


def summary_rows(env_id: str, summary: dict[str, dict[str, Stat | None]],
                 relative: dict[str, dict[str, Interval | None]], counts: dict[str, int],
                 frames: dict[str, int]) -> list[dict[str, object]]:
    """``summary.csv``'s rows: per method, each column's mean, interval, n and std, each improvement and its
    interval."""
    rows = []
    for method, row in summary.items():
        record = {"env_id": env_id, "method": method, "n": counts[method], "frames": frames[method]}
        for column, stat in row.items():
            key = csv_key(column)
            record[f"{key}_mean"] = csv_value(None if stat is None else stat.mean)
            record[f"{key}_ci_low"] = csv_value(None if stat is None else stat.low)
            record[f"{key}_ci_high"] = csv_value(None if stat is None else stat.high)
            record[f"{key}_n"] = 0 if stat is None else stat.n
            record[f"{key}_std"] = csv_value(None if stat is None else stat.std)
        for column, value in relative[method].items():
            key = csv_key(column) + "_pct"
            record[key] = csv_value(None if value is None else value.value)
            record[f"{key}_ci_low"] = csv_value(None if value is None else value.low)
            record[f"{key}_ci_high"] = csv_value(None if value is None else value.high)
        rows.append(record)
    return rows


def csv_key(column: str) -> str:
    """A table column as a CSV field name (``k-NN entropy`` → ``knn_entropy``)."""
    return column.replace(" ", "_").replace("-", "").lower()


def goal_figures(out: Path, env_id: str, runs: dict[str, list[RunRecord]],
                 stages: dict[str, dict[int, HeatmapSnapshot]], figures: list[tuple[str, str]]) -> list[Path]:
    """``goal_curves.png`` (goal success, steps to goal, reselection rate, random fraction against env frames, mean and
    95 % interval over seeds) and ``goal_stages.png`` (goals selected and reached at each quarter of training,
    :mod:`~sun_lightning.results.goal_stages`), for the methods that select goals; appends their
    titles to ``figures``."""
    written = []
    goal_runs = {m: [r for r in records if r.goals_selected > 0] for m, records in runs.items()}
    metrics = {name: title for name, title in GOAL_CURVES.items()
               if any(len(r.histories.get(name, ((),))[0]) for records in goal_runs.values() for r in records)}
    curves = {label(m): {metric: [r.histories[metric] for r in records if metric in r.histories] for metric in metrics}
              for m, records in goal_runs.items() if records}
    if metrics and curves:
        written.append(save_png(band_figure(curves, metrics, f"{env_name(env_id)}: goal statistics, mean and 95 % CI "
                                            "over seeds"), out / "goal_curves.png"))
        figures.append(("goal statistics against env frames", "goal_curves.png"))
    shown = {f"{label(m)} (seed {min(r.seed for r in runs[m])})": s for m, s in stages.items()
             if s and goal_runs.get(m)}  # a rule without goals (Random) has nothing to show
    if shown:
        written.append(save_png(goal_stages_figure(GoalGrid.of(env_id), shown, f"{env_name(env_id)}: goals selected "
                                                   "and reached at each quarter of training"), out / "goal_stages.png"))
        figures.append(("goals selected and reached at 25/50/75/100 % of training", "goal_stages.png"))
    return written


def write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    """Rows of equal keys as CSV (missing values are written ``n/a``, which pandas reads as NaN)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["method"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def csv_value(value: float | None) -> str:
    """A cell of a CSV: ``n/a`` where a value does not exist or is NaN (a run's CPU share resumed from a checkpoint
    older than its clock), else six significant digits."""
    return NA if value is None or math.isnan(value) else f"{value:.6g}"


def write_report(out_dir: str | Path, env_id: str, runs: dict[str, list[RunRecord]],
                 snapshots: dict[str, HeatmapSnapshot], context: Sequence[str] = (),
                 failed: Sequence[str] = (), stages: dict[str, dict[int, HeatmapSnapshot]] | None = None,
                 drawn_elsewhere: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """Write ``report.md``, ``summary.csv``, ``runs.csv``, ``curves.png``, ``heatmaps.png``, where the runs have
    them ``goal_curves.png`` and ``goal_stages.png``, and the runs' archive (:mod:`~sun_lightning.results.archive`)
    into ``out_dir``.

    Args:
        out_dir: the results folder (created).
        env_id: the environment compared.
        runs: method → its finished runs (rows in this order; a method without runs reads n/a).
        snapshots: method → the final heatmap snapshot shown for it.
        context: lines of Markdown under the title (where the numbers come from).
        failed: names of runs that failed.
        stages: method → its shown run's snapshots by percent of training (the goal-statistics grid).
        drawn_elsewhere: (title, file name) of figures already in ``out_dir`` to show in ``report.md`` too (those drawn
            from checkpoints, :mod:`~sun_lightning.results.checkpoint_figures`).

    Returns:
        The files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(runs)
    relative = relative_table(summary)
    written, figures = [], []
    drawn = {COVERAGE: "coverage", ENTROPY: "entropy"}
    if any(len(r.histories.get(KNN, ((),))[0]) > 1 for records in runs.values() for r in records):
        drawn[KNN] = "k-NN entropy"  # logged over training (runs that logged it once, at the end, draw no curve)
    if any(EVAL_SUCCESS in r.histories for records in runs.values() for r in records):
        drawn[EVAL_SUCCESS] = "eval success"
    curves = {f"{label(m)}": {metric: [r.histories[metric] for r in records if metric in r.histories]
                              for metric in drawn} for m, records in runs.items() if records}
    if curves:
        written.append(save_png(band_figure(curves, drawn, f"{env_name(env_id)}: mean and 95 % CI over seeds"),
                                out / "curves.png"))
        figures.append((" and ".join(drawn.values()) + " against env frames", "curves.png"))
    if snapshots:
        shown = {f"{label(m)} (seed {min(r.seed for r in runs[m])})": s for m, s in snapshots.items()}
        written.append(save_png(comparison_figure(GoalGrid.of(env_id), shown,
                                                  f"{env_name(env_id)}: final heatmaps (last quarter's goals)"),
                                out / "heatmaps.png"))
        figures.append(("final heatmaps per method", "heatmaps.png"))
    written += goal_figures(out, env_id, runs, stages or {}, figures)
    figures += drawn_elsewhere
    report = out / "report.md"
    report.write_text(markdown(env_id, runs, summary, relative, context, figures, failed))
    counts = {method: len(records) for method, records in runs.items()}
    frames = {method: min((r.frames for r in records), default=0) for method, records in runs.items()}
    rows = summary_rows(env_id, summary, relative, counts, frames)
    per_run = [{"env_id": env_id, "method": r.method, "seed": r.seed, "run_name": r.name, "run_id": r.run_id,
                "frames": r.frames, **{csv_key(k): csv_value(v) for k, v in run_values(r).items()},
                "minutes": csv_value(r.minutes), "frames_per_second": csv_value(r.frames_per_second),
                "cpu_share": csv_value(r.cpu_share),
                "hardware": r.hardware or NA}
               for records in runs.values() for r in records]
    written += [report, write_csv(out / "summary.csv", rows), write_csv(out / "runs.csv", per_run)]
    return written + write_archive(out, runs, stages)
