"""A written report's tables restated from its own ``runs.csv``: the paper's statistics (SPEC §7) for a report whose
MLflow store is gone.

A comparison report (:mod:`~sun_lightning.results.report`) keeps every run's final numbers in ``runs.csv``. Reports
written before the 95 % intervals gave mean ± sample std; their runs' stores did not travel with them, so they cannot be
written again from MLflow. This command reads ``runs.csv`` back and rewrites, in place, what those numbers determine:

- ``report.md``'s summary table (mean, [95 % bootstrap interval], n) and its relative AUC improvement table (with its
  interval), through the same functions a new report uses, so that a report restated from its own ``runs.csv`` is
  unchanged;
- ``summary.csv``, in the new report's columns.

The rest of an older report (the curves' ± std bands, the table of what the runs did) needs the runs' histories, which
``runs.csv`` does not hold: it stays, and ``report.md`` says so under the cells' definition.

    python -m sun_lightning.results.restate docs/antmaze_s docs/point_maze_h
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from sun_lightning.results.labels import NA
from sun_lightning.results.report import (CELLS, csv_key, relative_lines, relative_table, summarize_values,
                                          summary_lines, summary_rows, write_csv)

#: run_values' columns, in their order (:func:`~sun_lightning.results.report.run_values`).
COLUMNS = ("coverage", "entropy", "coverage AUC", "entropy AUC", "k-NN entropy", "goal success", "eval success")
#: The cells' definition of a report written before the intervals.
OLD_CELLS = "Cells: mean ± sample std"
RESTATED = ("Restated from this folder's `runs.csv` (`python -m sun_lightning.results.restate`): the summary and "
            "relative-improvement tables are the runs' own numbers with their 95 % intervals. The runs' histories were "
            "not kept, so the curves' bands and the table of what the runs did are still the original report's "
            "mean ± sample std.")


class RestateError(ValueError):
    """A folder that is not a report this command can restate."""


def read_runs(path: Path) -> tuple[str, dict[str, list[dict[str, float | None]]], dict[str, int]]:
    """``runs.csv`` → (env id, method → a value dict per run in file order, method → its fewest env frames)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise RestateError(f"{path} has no runs")
    missing = {"env_id", "method", "frames", "coverage", "entropy"} - set(rows[0])
    if missing:
        raise RestateError(f"{path} is not a report's runs.csv: no column {', '.join(sorted(missing))}")
    envs = {row["env_id"] for row in rows}
    if len(envs) > 1:
        raise RestateError(f"{path} holds runs of several environments ({', '.join(sorted(envs))}): one report each")
    values: dict[str, list[dict[str, float | None]]] = {}
    frames: dict[str, int] = {}
    for row in rows:
        method = row["method"]
        values.setdefault(method, []).append({column: _number(row.get(csv_key(column))) for column in COLUMNS})
        frames[method] = min(frames.get(method, int(row["frames"])), int(row["frames"]))
    return envs.pop(), values, frames


def _number(cell: str | None) -> float | None:
    return None if cell in (None, "", NA) else float(cell)


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


def restate(folder: str | Path) -> list[Path]:
    """Rewrite ``report.md``'s two tables and ``summary.csv`` in ``folder`` from its ``runs.csv``; the files written."""
    out = Path(folder)
    report, runs = out / "report.md", out / "runs.csv"
    for path in (report, runs):
        if not path.is_file():
            raise RestateError(f"{out} is not a report folder: {path.name} is missing")
    env_id, values, frames = read_runs(runs)
    summary = summarize_values(values)
    relative = relative_table(summary)
    counts = {method: len(rows) for method, rows in values.items()}
    lines = report.read_text().splitlines()
    lines = replace_block(lines, "| method | n | frames |", summary_lines(summary, counts, frames))
    lines = replace_block(lines, "Relative AUC improvement", relative_lines(relative))
    cells = next((i for i, line in enumerate(lines) if line.startswith("Cells:")), None)
    if cells is not None and lines[cells].startswith(OLD_CELLS):
        lines[cells:cells + 1] = [CELLS, RESTATED]
    report.write_text("\n".join(lines) + "\n")
    return [report, write_csv(out / "summary.csv", summary_rows(env_id, summary, relative, counts, frames))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.results.restate", description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", help="report folders (report.md and runs.csv), e.g. docs/antmaze_s")
    args = parser.parse_args(argv)
    for folder in args.folders:
        try:
            written = restate(folder)
        except ValueError as error:  # a RestateError, or a cell that is not a number
            print(f"error: {folder}: {error}", file=sys.stderr)
            return 2
        print("restated " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
