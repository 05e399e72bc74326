"""A written report's tables restated from its own ``runs.csv``, with the runs of other reports added: the paper's
statistics (SPEC §7) for reports whose MLflow stores are gone.

A comparison report (:mod:`~sun_lightning.results.report`) keeps every run's final numbers in ``runs.csv``. Reports
written before the 95 % intervals gave mean ± sample std; their runs' stores did not travel with them, so they cannot be
written again from MLflow. A study that ran on several machines, or whose store was lost with its machine, has its runs
in several reports' ``runs.csv``. This command reads ``runs.csv`` back (a row per run,
:mod:`~sun_lightning.results.recorded`) and rewrites, in place, what those numbers determine:

- ``report.md``'s summary table (mean, [95 % bootstrap interval], n), its relative AUC improvement table (with its
  interval), its hardware line and run-time table, through the same functions a new report uses, so that a report
  restated from its own ``runs.csv`` is unchanged;
- ``summary.csv``, in the new report's columns;
- for a study folder (``study.md`` over environment folders): each environment's report, then ``study.md``,
  ``study.csv``, ``auc_bars.png`` and ``improvement_bars.png`` (:func:`~sun_lightning.results.study.write_study`).

``--add`` first merges the rows of other reports (their ``runs.csv``, or a study's) into each ``runs.csv`` of the same
environment; an added run of a name already there replaces it. Added to a study, the report of an environment the
study does not have joins it whole, as a new environment folder. A report whose runs are all kept whole beside it
(``runs.json.gz`` and its snapshots, :mod:`~sun_lightning.results.archive`; every report written since) is then drawn
again entirely, figures included, and a study of such reports too. In a report with runs known only by their
``runs.csv`` row (written before the archive), the rest (its curves, heatmaps, the table of what the runs did; a
study's ``curves_grid.png``) stays as it was drawn, and the report says so under the cells' definition.

    python -m sun_lightning.results.restate docs/antmaze_s docs/point_maze_h
    python -m sun_lightning.results.restate docs/study_dqn --add other_machine/results/study-dqn
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from sun_lightning.results.archive import SNAPSHOTS, read_archive, read_stages, snapshot_files, write_records
from sun_lightning.results.labels import NA
from sun_lightning.results.recorded import ReportError, read_rows, report_runs
from sun_lightning.results.report import (CELLS, relative_lines, relative_table, summarize, summary_lines, summary_rows,
                                          write_csv, write_report)
from sun_lightning.results.runs import RunRecord, state_seeds
from sun_lightning.results.runtime import hardware_line, report_lines as runtime_lines
from sun_lightning.results.study import KNN_FIGURE, write_study
from sun_lightning.tracking.naming import env_name

#: The cells' definition of a report written before the intervals.
OLD_CELLS = "Cells: mean ± sample std"
RESTATED = ("Restated from this folder's `runs.csv` (`python -m sun_lightning.results.restate`): the summary and "
            "relative-improvement tables are the runs' own numbers with their 95 % intervals. The runs' histories were "
            "not kept, so the curves' bands and the table of what the runs did are still the original report's "
            "mean ± sample std.")
#: Under the cells' definition of a report that other reports' runs were added to.
ADDED = ("Runs added from other reports' `runs.csv` (`python -m sun_lightning.results.restate --add`) are in the "
         "summary, relative-improvement and run-time tables; the figures and the table of what the runs did were drawn "
         "before, from the runs then in the MLflow store. Added:")
#: Under a restated study's context.
STUDY_RESTATED = ("Restated from each environment's `runs.csv` (`python -m sun_lightning.results.restate`): the tables "
                  "and the bar figures hold every run listed there; the curves were drawn before, from the runs then "
                  "in the MLflow store.")
#: The errors this command reports (a folder that is not a report, a runs.csv that is not a report's).
RestateError = ReportError


def merge_rows(path: Path, added: Sequence[Path]) -> list[str]:
    """Merge into ``runs.csv`` at ``path`` the rows of its environment from the reports in ``added`` (each a report
    folder or a study folder): a name already there is replaced. Methods keep their order (new ones last), each
    method's runs by seed. The runs the added reports keep whole (:mod:`~sun_lightning.results.archive`) join this
    folder's archive, with their snapshots. Returns the names of the runs added."""
    rows = read_rows(path)
    env_id = rows[0]["env_id"]
    names = []
    merged = {row["run_name"]: row for row in rows}
    kept = read_archive(path.parent)
    for folder in added:
        found = [Path(folder) / "runs.csv", *sorted(Path(folder).glob("*/runs.csv"))]
        if not any(p.is_file() for p in found):
            raise RestateError(f"{folder} holds no report's runs.csv to add")
        for other in (p for p in found if p.is_file()):
            archived = read_archive(other.parent)
            for row in read_rows(other, empty=True):
                if row["env_id"] != env_id:
                    continue
                name = row["run_name"]
                merged[name] = row
                names.append(name)
                kept.pop(name, None)
                if name in archived:
                    kept[name] = archived[name]
                    for snapshot in snapshot_files(other.parent, name):
                        (path.parent / SNAPSHOTS).mkdir(exist_ok=True)
                        shutil.copyfile(snapshot, path.parent / SNAPSHOTS / snapshot.name)
    if not names:
        return []
    columns = list(dict.fromkeys(key for row in (rows[0], *merged.values()) for key in row))
    order = list(dict.fromkeys(row["method"] for row in (*rows, *merged.values())))
    ordered = sorted(merged.values(), key=lambda r: (order.index(r["method"]), int(r.get("seed") or 0)))
    write_csv(path, [{key: row.get(key) or NA for key in columns} for row in ordered])
    if kept:
        write_records(path.parent, [kept[row["run_name"]] for row in ordered if row["run_name"] in kept])
    return list(dict.fromkeys(names))


def replace_block(lines: list[str], start: str, new: list[str]) -> list[str]:
    """``lines`` with the block that begins at the line starting with ``start`` replaced by ``new``: that line, a blank
    line if one follows, and the table rows after them."""
    at = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
    if at is None:
        raise RestateError(f"report.md has no line starting {start!r}")
    end = at + 1
    if not lines[at].startswith("|") and end < len(lines) and lines[end] == "":
        end += 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[:at] + new + lines[end:]


def place_block(lines: list[str], start: str, new: list[str], before: str) -> list[str]:
    """:func:`replace_block`, where the block may be missing: then ``new`` goes in before the first line starting with
    ``before`` (else at the end), followed by a blank line; an empty ``new`` removes the block and the blank line
    before it."""
    at = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
    if at is not None:
        if new:
            return replace_block(lines, start, new)
        rest = replace_block(lines, start, [])
        return rest[:at - 1] + rest[at:] if at > 0 and rest[at - 1] == "" else rest
    if not new:
        return lines
    at = next((i for i, line in enumerate(lines) if line.startswith(before)), None)
    return lines + [""] + new if at is None else lines[:at] + new + [""] + lines[at:]


def restate(folder: str | Path, added: Sequence[str | Path] = ()) -> list[Path]:
    """Rewrite ``report.md``'s tables (summary, relative improvement, run time), its hardware line and ``summary.csv``
    in ``folder`` from its ``runs.csv``, after merging the rows of the reports in ``added``; the files written."""
    out = Path(folder)
    report, runs_csv = out / "report.md", out / "runs.csv"
    for path in (report, runs_csv):
        if not path.is_file():
            raise RestateError(f"{out} is not a report folder: {path.name} is missing")
    names = merge_rows(runs_csv, [Path(a) for a in added]) if added else []
    env_id, runs = report_runs(out)
    if whole(runs):
        return redraw(out, env_id, runs)
    summary = summarize(runs)
    relative = relative_table(summary)
    counts = {method: len(records) for method, records in runs.items()}
    frames = {method: min((r.frames for r in records), default=0) for method, records in runs.items()}
    lines = report.read_text().splitlines()
    held = [r for records in runs.values() for r in records]
    lines[2:3] = [state_seeds(line, held) for line in lines[2:3]]  # the seeds of the runs it now holds
    lines = replace_block(lines, "| method | n | frames |", summary_lines(summary, counts, frames))
    lines = replace_block(lines, "Relative AUC improvement", relative_lines(relative))
    lines = place_block(lines, "Run time (wall clock", runtime_lines(runs)[1:], "![")
    hardware = hardware_line(runs)
    at = next((i for i, line in enumerate(lines) if line.startswith("Hardware:")), None)
    if at is not None:
        lines[at:at + 1] = hardware
    elif hardware:
        table = next(i for i, line in enumerate(lines) if line.startswith("| method | n | frames |"))
        lines[table - 1:table - 1] = hardware
    cells = next((i for i, line in enumerate(lines) if line.startswith("Cells:")), None)
    if cells is not None and lines[cells].startswith(OLD_CELLS):
        lines[cells:cells + 1] = [CELLS, RESTATED]
    if cells is not None and cells + 1 < len(lines) and lines[cells + 1] == RESTATED:
        cells += 1
    if names and cells is not None:
        previous = lines[cells + 1].removeprefix(ADDED).strip(" .").split(", ") if (
            cells + 1 < len(lines) and lines[cells + 1].startswith(ADDED)) else []
        note = f"{ADDED} {', '.join(dict.fromkeys([n for n in previous if n] + names))}."
        lines[cells + 1:cells + 1 + bool(previous)] = [note]
    report.write_text("\n".join(lines) + "\n")
    return [report, write_csv(out / "summary.csv", summary_rows(env_id, summary, relative, counts, frames))]


def whole(runs: dict[str, list[RunRecord]]) -> bool:
    """Whether every run is kept whole (its histories at hand), so that its report can be drawn again."""
    records = [r for rs in runs.values() for r in rs]
    return bool(records) and all(r.histories for r in records)


def redraw(out: Path, env_id: str, runs: dict[str, list[RunRecord]]) -> list[Path]:
    """Draw the report in ``out`` again from runs kept whole (:func:`~sun_lightning.results.report.write_report`):
    the context under its title, its failed runs and the figures drawn from checkpoints (``svf.png``) are kept; the
    heatmaps come from the snapshots the folder keeps."""
    lines = (out / "report.md").read_text().splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("| method | n | frames |"))
    held = [r for records in runs.values() for r in records]
    context = [state_seeds(line, held) for line in lines[2:table] if line and line != RESTATED
               and not line.startswith(("Hardware:", ADDED))]
    failed = next((line.split(": ", 1)[1].split(", ") for line in lines if line.startswith("Runs that failed")), [])
    redrawn = {"curves.png", "heatmaps.png", "goal_curves.png", "goal_stages.png"}
    elsewhere = [(title, file) for title, file in re.findall(r"^!\[(.*)\]\((.*)\)$", "\n".join(lines), re.M)
                 if file not in redrawn and (out / file).is_file()]
    stages = {method: read_stages(out, min(records, key=lambda r: r.seed).name)
              for method, records in runs.items() if records}
    stages = {method: saved for method, saved in stages.items() if saved}
    snapshots = {method: saved[max(saved)] for method, saved in stages.items()}
    return write_report(out, env_id, runs, snapshots, context, failed, stages, elsewhere)


def restate_study(folder: str | Path, added: Sequence[str | Path] = ()) -> list[Path]:
    """Restate each environment's report of the study in ``folder`` (:func:`restate`), then its ``study.md``,
    ``study.csv`` and bar figures from the environments' runs; its ``curves_grid.png`` stays as drawn unless every run
    is kept whole, its ``knn_entropy.png`` unless LunarLanderFull's are. The files written."""
    out = Path(folder)
    old = (out / "study.md").read_text().splitlines()
    linked = list(dict.fromkeys(re.findall(r"\]\(([^)/]+)/report\.md\)", "\n".join(old))))
    envs = [name for name in linked if (out / name / "runs.csv").is_file()] or sorted(
        p.parent.name for p in out.glob("*/runs.csv"))
    if not envs:
        raise RestateError(f"{out} is not a study folder: no environment folder with a runs.csv")
    envs += join_environments(out, envs, [Path(a) for a in added])
    written, study, reports = [], {}, {}
    for name in envs:
        written += restate(out / name, added)
        env_id, runs = report_runs(out / name)
        study[env_id], reports[env_id] = runs, f"{name}/report.md"
    first_section = next((i for i, line in enumerate(old) if line.startswith("## ")), len(old))
    # LunarLanderFull's k-NN entropy curve is drawn again once its runs are kept whole, whatever the others
    knn_whole = any(env_name(env_id) == "LunarLanderFull" and whole(runs) for env_id, runs in study.items())
    kept = [] if all(whole(runs) for runs in study.values()) else [
        (title, file) for title, file in (("coverage and entropy per environment", "curves_grid.png"),
                                          ("LunarLanderFull: k-NN entropy over training", KNN_FIGURE))
        if (out / file).is_file() and not (file == KNN_FIGURE and knn_whole)]
    held = [r for runs in study.values() for records in runs.values() for r in records]
    context = [state_seeds(re.sub(r"^\d+ environments,", f"{len(envs)} environments,", line), held)
               for line in old[2:first_section] if line and line != STUDY_RESTATED] + [STUDY_RESTATED] * bool(kept)
    failed = next((line.split(": ", 1)[1].split(", ") for line in old if line.startswith("Runs that failed")), [])
    return written + write_study(out, study, context, reports, failed, kept=kept)


def join_environments(out: Path, envs: Sequence[str], added: Sequence[Path]) -> list[str]:
    """Copy into the study in ``out`` (its environment folders ``envs``) the reports in ``added`` (report or study
    folders) of environments it does not have yet, each to a folder named after its environment; their names. The
    runs of an environment the study has join it through :func:`merge_rows`."""
    have = {read_rows(out / name / "runs.csv")[0]["env_id"] for name in envs}
    joined = []
    for folder in added:
        for runs_csv in (p for p in [folder / "runs.csv", *sorted(folder.glob("*/runs.csv"))] if p.is_file()):
            rows = read_rows(runs_csv, empty=True)
            if not rows or rows[0]["env_id"] in have:
                continue
            name = env_name(rows[0]["env_id"])
            if (out / name).exists():
                raise RestateError(f"{out / name} is in the way of {runs_csv.parent}'s {rows[0]['env_id']}: it is not "
                                   "one of the study's environment folders")
            shutil.copytree(runs_csv.parent, out / name)
            have.add(rows[0]["env_id"])
            joined.append(name)
    return joined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.results.restate", description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", help="report folders (report.md and runs.csv), e.g. docs/antmaze_s, or "
                        "study folders (study.md over environment folders), e.g. docs/study_dqn")
    parser.add_argument("--add", nargs="+", default=[], metavar="FOLDER",
                        help="report or study folders whose runs.csv rows join those of the same environment first")
    args = parser.parse_args(argv)
    for folder in args.folders:
        try:
            if (Path(folder) / "study.md").is_file():
                written = restate_study(folder, args.add)
            else:
                written = restate(folder, args.add)
        except ValueError as error:  # a RestateError, or a cell that is not a number
            print(f"error: {folder}: {error}", file=sys.stderr)
            return 2
        print("restated " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
