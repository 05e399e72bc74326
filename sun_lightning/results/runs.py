"""Finished ``fit`` runs read back from MLflow: what a comparison report is made of.

A run's final metrics are its last logged values; its curves are the metric histories (step = env
frames, SPEC §7); its heatmaps are the snapshot the results callback saved last
(``heatmaps/heatmaps_<pct>.npz``, :mod:`~sun_lightning.results.snapshot`).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import mlflow

from sun_lightning.metrics.auc import curve_auc
from sun_lightning.results.curves import CURVES, GOAL_CURVES, Curve
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.tracking.store import KIND_TAG

#: Goals drawn in each logging window: a run that never drew one has no goal statistics (Random).
SELECTED = "explore/goals/selected"
#: The run's wall-clock minutes and env frames per second over them, logged at its end
#: (:class:`~sun_lightning.callbacks.exploration.ExplorationLogger`).
MINUTES, FRAMES_PER_SECOND = "perf/run/minutes", "perf/run/frames_per_second"
#: CPU seconds of the run's process per wall-clock second: whether its minutes were taken under load.
CPU_SHARE = "perf/run/cpu_share"
#: Where the results callback puts its heatmap snapshots in a run's artifacts.
HEATMAP_DIR = "heatmaps"
STOP_SUFFIX = "_stop"  # a snapshot taken where a run stopped before its budget (callbacks/results.py)


@dataclass
class RunRecord:
    """One finished run: identity, final metrics and curves.

    Attributes:
        name, run_id: the MLflow run.
        method, seed: from its tags (or its name ``<env>-<method>-seed<k>``).
        final: the last logged value of every metric.
        histories: (env frames, values) of the curve metrics (:data:`~sun_lightning.results.curves.CURVES` and
            :data:`~sun_lightning.results.curves.GOAL_CURVES`).
        goals_selected: goals drawn over the whole run (0 for a rule without goals).
        hardware: where it ran (its ``hardware`` tag, :func:`~sun_lightning.tracking.hardware`; "" if untagged).
        aucs, last_frame: a record read back from a report's ``runs.csv`` (:mod:`~sun_lightning.results.restate`)
            has no histories: its AUCs by metric and its last env frame, as the report wrote them.
    """

    name: str
    run_id: str
    method: str
    seed: int
    final: dict[str, float] = field(default_factory=dict)
    histories: dict[str, Curve] = field(default_factory=dict)
    goals_selected: float = 0.0
    hardware: str = ""
    aucs: dict[str, float] = field(default_factory=dict)
    last_frame: int = 0

    @property
    def frames(self) -> int:
        """The last env frame the run logged its curves at."""
        return int(max((max(steps) for steps, _ in self.histories.values() if len(steps)), default=self.last_frame))

    @property
    def minutes(self) -> float | None:
        """Wall-clock minutes of the run (``None``: a run logged before they were recorded)."""
        return self.final.get(MINUTES)

    @property
    def frames_per_second(self) -> float | None:
        """Env frames per wall-clock second over the whole run (``None``: not recorded)."""
        return self.final.get(FRAMES_PER_SECOND)

    @property
    def cpu_share(self) -> float | None:
        """The run's CPU seconds per wall-clock second (``None``: not recorded; NaN: resumed from an older checkpoint)."""
        return self.final.get(CPU_SHARE)

    @property
    def cpu_minutes(self) -> float | None:
        """CPU minutes the run used, its minutes × its CPU share: what runs that shared a machine compare by, where
        their wall clocks do not (``None``: either is not recorded, or the run resumed from before the clock)."""
        share = self.cpu_share
        if self.minutes is None or share is None or share != share:
            return None
        return self.minutes * share

    def auc(self, metric: str) -> float | None:
        """Area under ``metric``'s curve against env frames (:func:`~sun_lightning.metrics.auc.curve_auc`)."""
        steps, values = self.histories.get(metric, ((), ()))
        return curve_auc(list(steps), list(values)) if len(steps) else self.aucs.get(metric)


#: "seeds 0, 1" in a report's or a study's context line, up to the frames, the budgets or the sentence's end.
SEEDS_STATED = re.compile(r"seeds -?\d+(?:, -?\d+)*?(?=, [\d /]+ env frames|, no env frames|, budgets|\.)")


def seeds_held(records) -> str:
    """The seeds of ``records`` as a report states them ("0, 1, 2"): those it holds, not those it was asked for."""
    return ", ".join(map(str, sorted({r.seed for r in records})))


def state_seeds(line: str, records) -> str:
    """``line`` with the seeds it states replaced by those of ``records`` (unchanged where there are none)."""
    held = seeds_held(records)
    return SEEDS_STATED.sub(f"seeds {held}", line, count=1) if held else line


def _identity(run) -> tuple[str, int] | None:
    tags = run.data.tags
    if "method" in tags and "seed" in tags and tags["seed"].lstrip("-").isdigit():
        return tags["method"], int(tags["seed"])
    name = run.info.run_name or ""
    head, _, seed = name.rpartition("-seed")
    if not seed.isdigit() or "-" not in head:
        return None
    return head.split("-", 1)[1], int(seed)


def finished_runs(client: mlflow.MlflowClient, experiment: str) -> dict[str, RunRecord]:
    """Run name → :class:`RunRecord` of the experiment's finished ``fit`` runs (the newest of a name wins;
    comparison parents are left out)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return {}
    records: dict[str, RunRecord] = {}
    for run in client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'",
                                  order_by=["attributes.start_time DESC"]):
        name = run.info.run_name
        identity = _identity(run)
        if name in records or identity is None or run.data.tags.get(KIND_TAG) == "comparison":
            continue
        record = RunRecord(name, run.info.run_id, *identity, final=dict(run.data.metrics),
                           hardware=run.data.tags.get("hardware", ""))
        for metric in (*CURVES, *GOAL_CURVES):
            if metric in run.data.metrics:
                history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, metric))
                record.histories[metric] = ([s for s, _ in history], [v for _, v in history])
        if SELECTED in run.data.metrics:
            record.goals_selected = sum(m.value for m in client.get_metric_history(run.info.run_id, SELECTED))
        records[name] = record
    return records


def load_snapshots(client: mlflow.MlflowClient, run_id: str) -> dict[int, HeatmapSnapshot]:
    """Every heatmap snapshot a run saved (25/50/75/100 % of training), by percentage. A snapshot taken where the
    run stopped before its budget counts while it is the run's last: once the run resumed past it, its scheduled
    snapshots stand alone (the one at a stop's percent wins over the stop)."""
    saved = sorted(a.path for a in client.list_artifacts(run_id, HEATMAP_DIR) if a.path.endswith(".npz"))
    with tempfile.TemporaryDirectory() as tmp:
        snapshots = [(path, HeatmapSnapshot.load(client.download_artifacts(run_id, path, tmp))) for path in saved]
    last = max((s.frames for _, s in snapshots), default=0)
    stops = [s for path, s in snapshots if path.endswith(f"{STOP_SUFFIX}.npz") and s.frames == last]
    return {s.percent: s for s in [*stops, *(s for path, s in snapshots if not path.endswith(f"{STOP_SUFFIX}.npz"))]}
