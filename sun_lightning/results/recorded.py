"""Runs as their reports recorded them: a report folder's ``runs.csv`` (a row per run), the runs it keeps whole beside
it where it does (:mod:`~sun_lightning.results.archive`), and the runs of several reports or studies at once (SPEC §7).

What a report records is what the comparison runner can take for finished when the MLflow store that ran them is gone
(``compare --reuse``) and what :mod:`~sun_lightning.results.restate` writes reports again from.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from sun_lightning.results.archive import read_archive
from sun_lightning.results.labels import NA
from sun_lightning.results.report import COVERAGE, ENTROPY, EVAL_SUCCESS, KNN, SUCCESS
from sun_lightning.results.runs import CPU_SHARE, FRAMES_PER_SECOND, MINUTES, RunRecord
from sun_lightning.tracking.naming import env_name

#: ``runs.csv`` columns of a run's final values → the metric they are the last value of.
FINAL = {"coverage": COVERAGE, "entropy": ENTROPY, "knn_entropy": KNN, "goal_success": SUCCESS,
         "eval_success": EVAL_SUCCESS, "minutes": MINUTES, "frames_per_second": FRAMES_PER_SECOND,
         "cpu_share": CPU_SHARE}
#: ``runs.csv`` columns of a run's AUCs → the metric whose curve they are the area under.
AUCS = {"coverage_auc": COVERAGE, "entropy_auc": ENTROPY}


class ReportError(ValueError):
    """A folder that is not a report, or a ``runs.csv`` that is not a report's."""


def read_rows(path: Path, empty: bool = False) -> list[dict[str, str]]:
    """A report's ``runs.csv``, a dict per run (checked to be one; ``empty``: a report of no finished run is)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        if empty:
            return []
        raise ReportError(f"{path} has no runs")
    missing = {"env_id", "method", "frames", "coverage", "entropy"} - set(rows[0])
    if missing:
        raise ReportError(f"{path} is not a report's runs.csv: no column {', '.join(sorted(missing))}")
    return rows


def record_from_row(row: dict[str, str]) -> RunRecord:
    """A run as :func:`~sun_lightning.results.report.write_report` wrote it into ``runs.csv``: its final values, AUCs,
    last env frame and hardware, no histories. A run with a goal success drew goals (``goals_selected`` 1)."""
    final = {metric: value for column, metric in FINAL.items() if (value := _number(row.get(column))) is not None}
    aucs = {metric: value for column, metric in AUCS.items() if (value := _number(row.get(column))) is not None}
    seed = row.get("seed", "")
    return RunRecord(row.get("run_name") or f"{env_name(row['env_id'])}-{row['method']}-seed{seed}",
                     row.get("run_id", ""), row["method"], int(seed) if seed.lstrip("-").isdigit() else 0, final,
                     goals_selected=1.0 if SUCCESS in final else 0.0,
                     hardware="" if row.get("hardware") in (None, "", NA) else row["hardware"], aucs=aucs,
                     last_frame=int(float(row["frames"])))


def read_records(path: Path) -> tuple[str, dict[str, list[RunRecord]]]:
    """``runs.csv`` → (env id, method → its runs in file order)."""
    rows = read_rows(path)
    envs = {row["env_id"] for row in rows}
    if len(envs) > 1:
        raise ReportError(f"{path} holds runs of several environments ({', '.join(sorted(envs))}): one report each")
    runs: dict[str, list[RunRecord]] = {}
    for row in rows:
        runs.setdefault(row["method"], []).append(record_from_row(row))
    return envs.pop(), runs


def report_runs(folder: Path) -> tuple[str, dict[str, list[RunRecord]]]:
    """A report folder's runs (:func:`read_records`; a run the folder keeps whole is its kept record, histories and
    all), its methods in the order of its ``summary.csv``, where one is, with those that have no run there (planned,
    none finished) kept as empty."""
    env_id, runs = read_records(folder / "runs.csv")
    kept = read_archive(folder)
    runs = {method: [kept.get(r.name, r) for r in records] for method, records in runs.items()}
    listed = []
    if (folder / "summary.csv").is_file():
        with open(folder / "summary.csv", newline="") as f:
            listed = [row["method"] for row in csv.DictReader(f) if row.get("method")]
    return env_id, {method: runs.get(method, []) for method in dict.fromkeys([*listed, *runs])}


def _number(cell: str | None) -> float | None:
    return None if cell in (None, "", NA) else float(cell)


@dataclass(frozen=True)
class Recorded:
    """A run a report recorded, and the report folder that holds it (its snapshots are there)."""

    record: RunRecord
    folder: Path


def recorded_runs(folders: list[str | Path]) -> dict[str, Recorded]:
    """Run name → the run as the reports in ``folders`` recorded it (each a report folder or a study of them; a later
    folder's run of a name wins).

    Raises:
        ReportError: a folder holds no report.
    """
    out: dict[str, Recorded] = {}
    for folder in map(Path, folders):
        reports = [f for f in (folder, *sorted(p for p in folder.glob("*") if p.is_dir())) if (f / "runs.csv").is_file()]
        if not reports:
            raise ReportError(f"{folder} holds no report (a runs.csv, or folders of them)")
        for report in reports:
            if not read_rows(report / "runs.csv", empty=True):
                continue  # a report of runs none of which finished
            for records in report_runs(report)[1].values():
                out.update({r.name: Recorded(r, report) for r in records})
    return out

