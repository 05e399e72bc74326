"""A report's runs kept whole beside it: what a report is drawn from, so that it can be drawn again without the MLflow
store (SPEC §7).

The runs of a study live in its MLflow store until their reports are written; a store can be lost with its machine, and
a study that ran on several machines has a store each. Each report therefore keeps, beside ``runs.csv``:

- ``runs.json.gz``: every run's :class:`~sun_lightning.results.runs.RunRecord` (its final metrics, the curve histories
  against env frames, goals drawn, hardware);
- ``snapshots/<run>_<pct>.npz``: the heatmap snapshots of the run each method is shown by (its lowest seed) at 25, 50,
  75 and 100 % of training (:class:`~sun_lightning.results.snapshot.HeatmapSnapshot`).

:mod:`~sun_lightning.results.restate` reads them back: reports whose runs are all kept here are drawn again whole
(figures included) when runs of other reports are added to them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from sun_lightning.results.runs import RunRecord
from sun_lightning.results.snapshot import HeatmapSnapshot

ARCHIVE, SNAPSHOTS = "runs.json.gz", "snapshots"
#: The archive's format: a reader refuses others.
VERSION = 1


def record_dict(record: RunRecord) -> dict:
    """A run as plain JSON values (histories as [steps, values] lists)."""
    return {"name": record.name, "run_id": record.run_id, "method": record.method, "seed": record.seed,
            "final": record.final, "goals_selected": record.goals_selected, "hardware": record.hardware,
            "histories": {metric: [list(map(int, steps)), list(map(float, values))]
                          for metric, (steps, values) in record.histories.items()}}


def record_of(data: dict) -> RunRecord:
    """:func:`record_dict` read back."""
    return RunRecord(data["name"], data["run_id"], data["method"], int(data["seed"]), dict(data["final"]),
                     {metric: (steps, values) for metric, (steps, values) in data["histories"].items()},
                     float(data["goals_selected"]), data.get("hardware", ""))


def write_records(folder: str | Path, records: list[RunRecord]) -> Path:
    """Keep ``records`` in ``folder``'s ``runs.json.gz`` (replacing what it kept)."""
    path = Path(folder) / ARCHIVE
    text = json.dumps({"version": VERSION, "runs": [record_dict(r) for r in records]})
    # no timestamp in the gzip header: the same runs give the same bytes, so a restate leaves git's copy unchanged
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return path


def write_archive(folder: str | Path, runs: dict[str, list[RunRecord]],
                  stages: dict[str, dict[int, HeatmapSnapshot]] | None = None) -> list[Path]:
    """Keep ``runs`` (method → its runs) and the snapshots each method is shown by (``stages``: method → percent →
    snapshot, of its lowest seed's run) in ``folder``; the files written."""
    out = Path(folder)
    written = [write_records(out, [r for records in runs.values() for r in records])]
    for method, saved in (stages or {}).items():
        if not saved or not runs.get(method):
            continue
        (out / SNAPSHOTS).mkdir(exist_ok=True)
        name = file_name(min(runs[method], key=lambda r: r.seed).name)
        for percent, snapshot in saved.items():
            snapshot.save(out / SNAPSHOTS / f"{name}_{percent:03d}.npz")
            written.append(out / SNAPSHOTS / f"{name}_{percent:03d}.npz")
    return written


def read_archive(folder: str | Path) -> dict[str, RunRecord]:
    """Run name → its record kept in ``folder`` (empty: the folder keeps none, a report written before archives)."""
    path = Path(folder) / ARCHIVE
    if not path.is_file():
        return {}
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    if data.get("version") != VERSION:
        raise ValueError(f"{path} is an archive of version {data.get('version')}; this code reads version {VERSION}")
    return {r["name"]: record_of(r) for r in data["runs"]}


def read_stages(folder: str | Path, name: str) -> dict[int, HeatmapSnapshot]:
    """The snapshots of run ``name`` kept in ``folder``, by percent of training (empty: none kept)."""
    return {int(p.stem.rsplit("_", 1)[1]): HeatmapSnapshot.load(p) for p in snapshot_files(folder, name)}


def snapshot_files(folder: str | Path, name: str) -> list[Path]:
    """The snapshot files of run ``name`` kept in ``folder``."""
    return sorted((Path(folder) / SNAPSHOTS).glob(f"{file_name(name)}_[0-9][0-9][0-9].npz"))


def file_name(name: str) -> str:
    """A run name as a file name (a path separator or a glob character would break it)."""
    return "".join("_" if c in "/\\*?[]" else c for c in name)
