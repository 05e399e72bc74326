"""A report's tables restated from its own runs.csv: unchanged for a new report, intervals for an old one; other
reports' runs added to a report and to a study, by hand."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.helpers import THREE_ROOM
from tests.unit.results.test_results import _first_table, _record
from tests.unit.results.test_figures import KNN
from tests.unit.results.test_study_report import COV, ENT, MOUNTAIN_CAR, flat
from sun_lightning.results.archive import read_archive, read_stages
from sun_lightning.results.report import write_report
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.results.restate import (ADDED, RESTATED, STUDY_RESTATED, RestateError, main, restate,
                                         restate_study)
from sun_lightning.results.runs import CPU_SHARE, MINUTES, state_seeds
from sun_lightning.results.study import write_study

RUNS_HEADER = "env_id,method,seed,run_name,run_id,frames,coverage,entropy,coverage_auc,entropy_auc,goal_success\n"
#: A report as reports were written before the intervals: mean ± sample std, improvements without an interval.
OLD_REPORT = """# ThreeRoom: exploration by method

`sun_lightning/ThreeRoom-v0`, config `conf/three_room.yaml`, seeds 0, 1, 2000 env frames per run.
Cells: mean ± sample std over the n seeds that finished (n = 1: the value alone); AUC: the curve's mean height.
Hardware: SUN adaptive, Random: cpu (AMD EPYC, 2 cores).

| method | n | frames | coverage | entropy | coverage AUC | entropy AUC | goal success |
|---|---|---|---|---|---|---|---|
| SUN adaptive | 2 | 2000 | 0.700 ± 0.141 | 0.800 ± 0.141 | 0.500 ± 0.141 | 0.700 ± 0.141 | 0.600 ± 0.141 |
| Random | 2 | 2000 | 0.300 ± 0.000 | 0.500 ± 0.000 | 0.250 ± 0.071 | 0.400 ± 0.000 | n/a |

Relative AUC improvement (%) as in the paper's table: on the means over seeds.

| method | coverage AUC vs Random | entropy AUC vs Random |
|---|---|---|
| SUN adaptive | +100.0 % | +75.0 % |
| Random | n/a | n/a |

What the runs did (their last logging window):

| method | steps to goal |
|---|---|
| SUN adaptive | 11.605 ± 4.532 |

![coverage and entropy against env frames](curves.png)
"""
OLD_RUNS = RUNS_HEADER + "".join(
    f"sun_lightning/ThreeRoom-v0,{method},{seed},ThreeRoom-{method}-seed{seed},id{seed},2000,{row}\n"
    for method, seed, row in [("sun", 0, "0.6,0.7,0.4,0.6,0.5"), ("sun", 1, "0.8,0.9,0.6,0.8,0.7"),
                              ("random", 0, "0.3,0.5,0.2,0.4,n/a"), ("random", 1, "0.3,0.5,0.3,0.4,n/a")])


def test_a_new_report_restated_from_its_runs_csv_is_unchanged(tmp_path):
    runs = {  # three seeds go through the bootstrap, two through the range, one holds its value
        "sun": [_record("sun", 0, [0.2, 0.6], [0.5, 0.7]), _record("sun", 1, [0.4, 0.8], [0.7, 0.9], success=0.7),
                _record("sun", 2, [0.3, 0.9], [0.6, 0.8], success=0.2)],
        "adagoal": [_record("adagoal", 0, [0.2, 0.4], [0.4, 0.6])],
        "random": [_record("random", 0, [0.1, 0.3], [0.3, 0.5], goals=0.0),
                   _record("random", 1, [0.2, 0.3], [0.4, 0.5], goals=0.0)],
    }
    for i, record in enumerate(runs["sun"] + runs["random"]):  # the run-time table and hardware line, restated too
        record.final.update({MINUTES: 10.0 + i, CPU_SHARE: 0.5 + i / 10})
        record.hardware = "cpu (AMD EPYC, 2 cores)"
    write_report(tmp_path, THREE_ROOM, runs, {}, ["context", "Cells: as now."])
    before = {name: (tmp_path / name).read_text() for name in ("report.md", "summary.csv", "runs.csv")}
    # its runs are kept whole beside it: the report is drawn again, figures and all, and reads the same
    written = restate(tmp_path)
    assert {p.name for p in written} == {"report.md", "summary.csv", "runs.csv", "curves.png", "runs.json.gz"}
    assert {name: (tmp_path / name).read_text() for name in before} == before
    # from runs.csv alone (a report written before the archive): its tables, the same
    (tmp_path / "runs.json.gz").unlink()
    written = restate(tmp_path)
    assert [p.name for p in written] == ["report.md", "summary.csv"]
    assert {name: (tmp_path / name).read_text() for name in before} == before
    assert "[" in _first_table(before["report.md"])["SUN adaptive"][2]  # the intervals were there to keep
    assert "| SUN adaptive | 11.0 [10.0, 12.0] (n = 3) |" in before["report.md"] and "Hardware: " in before["report.md"]


def test_an_old_report_gets_the_intervals_by_hand_and_keeps_the_rest(tmp_path):
    (tmp_path / "report.md").write_text(OLD_REPORT)
    (tmp_path / "runs.csv").write_text(OLD_RUNS)
    restate(tmp_path)
    text = (tmp_path / "report.md").read_text()
    rows = _first_table(text)
    # two seeds: the interval of the mean is their range
    assert rows["SUN adaptive"] == ["2", "2000", "0.700 [0.600, 0.800] (n = 2)", "0.800 [0.700, 0.900] (n = 2)",
                                    "0.500 [0.400, 0.600] (n = 2)", "0.700 [0.600, 0.800] (n = 2)",
                                    "0.600 [0.500, 0.700] (n = 2)"]
    assert rows["Random"][4] == "0.250 [0.200, 0.300] (n = 2)" and rows["Random"][-1] == "n/a"
    # coverage AUC 0.5 against 0.25: +100 %; both pairs of seeds resampled: 0.4 / 0.3 − 1 to 0.6 / 0.2 − 1
    assert "| SUN adaptive | +100.0 % [+33.3, +200.0] (n = 2 / 2) | +75.0 % [+50.0, +100.0] (n = 2 / 2) |" in text
    assert "Cells: mean ± sample std" not in text and RESTATED in text and "Cells: mean over the n seeds" in text
    # what runs.csv does not hold stays as it was
    assert "| SUN adaptive | 11.605 ± 4.532 |" in text and text.endswith("](curves.png)\n")
    assert text.count("| method |") == 3
    summary = {row["method"]: row for row in csv.DictReader(open(tmp_path / "summary.csv"))}
    assert float(summary["sun"]["coverage_auc_vs_random_pct_ci_high"]) == pytest.approx(200.0)
    assert summary["random"]["goal_success_n"] == "0"
    restate(tmp_path)  # a second restatement changes nothing
    assert (tmp_path / "report.md").read_text() == text


def test_what_cannot_be_restated_is_named(tmp_path, capsys):
    (tmp_path / "report.md").write_text(OLD_REPORT)
    with pytest.raises(RestateError, match="runs.csv is missing"):
        restate(tmp_path)
    (tmp_path / "runs.csv").write_text(OLD_RUNS.replace("sun_lightning/ThreeRoom-v0,random,1",
                                                        "sun_lightning/GridMaze-v0,random,1"))
    with pytest.raises(RestateError, match="several environments"):
        restate(tmp_path)
    (tmp_path / "runs.csv").write_text("env_id,method,seed\nx,sun,0\n")
    with pytest.raises(RestateError, match="no column coverage, entropy, frames"):
        restate(tmp_path)
    assert main([str(tmp_path / "no_report")]) == 2
    assert "report.md is missing" in capsys.readouterr().err


def test_runs_of_another_report_join_the_tables_and_are_named(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    (here).mkdir()
    (here / "report.md").write_text(OLD_REPORT)
    (here / "runs.csv").write_text(OLD_RUNS)
    # the other machine ran SUN's seed 2 (both AUCs 0.8, 1 minute), AdaGoal's seed 0 (0.2, 30 minutes) and a GridMaze run
    write_report(there, THREE_ROOM, {
        "sun": [flat("ThreeRoom", "sun", 2, 0.8)],
        "adagoal": [flat("ThreeRoom", "adagoal", 0, 0.2, minutes=30.0)]}, {}, ["context", "Cells: as now."])
    (there / "runs.csv").write_text((there / "runs.csv").read_text() + (there / "runs.csv").read_text().splitlines()[
        1].replace("ThreeRoom-v0", "GridMaze-v0").replace("ThreeRoom-sun", "GridMaze-sun") + "\n")
    restate(here, [there])
    rows = list(csv.DictReader(open(here / "runs.csv")))
    assert [(r["method"], r["seed"]) for r in rows] == [("sun", "0"), ("sun", "1"), ("sun", "2"), ("random", "0"),
                                                        ("random", "1"), ("adagoal", "0")]
    assert rows[0]["minutes"] == "n/a" and rows[2]["minutes"] == "1" and rows[5]["minutes"] == "30"
    text = (here / "report.md").read_text()
    table = _first_table(text)
    # coverage AUC of SUN: 0.4, 0.6 and 0.8 → 0.6, three seeds now; entropy 0.6, 0.8 and 0.8 → 0.733
    assert table["SUN adaptive"][0] == "3" and table["SUN adaptive"][4].startswith("0.600 [")
    assert table["SUN adaptive"][5].startswith("0.733 [") and table["AdaGoal"][4] == "0.200 (n = 1)"
    # against AdaGoal's one seed (held at 0.2): (0.6 − 0.2) / 0.2 = +200 %
    assert "coverage AUC vs AdaGoal" in text and "| SUN adaptive | +200.0 % [" in text
    # the run time of the runs that recorded it, n counting them; the note names the added runs
    assert "| SUN adaptive | 1.0 (n = 1) |" in text and "| AdaGoal | 30.0 (n = 1) |" in text
    assert f"{ADDED} ThreeRoom-sun-seed2, ThreeRoom-adagoal-seed0." in text
    assert "config `conf/three_room.yaml`, seeds 0, 1, 2, 2000 env frames per run." in text  # the seeds it now holds
    assert text.index("Run time (wall clock") < text.index("![coverage")
    (tmp_path / "none").mkdir()  # a report whose runs none finished adds nothing
    (tmp_path / "none" / "runs.csv").write_text(RUNS_HEADER)
    restate(here, [there, tmp_path / "none"])  # adding the same runs again changes nothing
    assert (here / "report.md").read_text() == text and len(list(csv.DictReader(open(here / "runs.csv")))) == 6
    with pytest.raises(RestateError, match="holds no report's runs.csv to add"):
        restate(here, [tmp_path / "nowhere"])


def _restated_study(tmp_path, whole: bool):
    """A study of ThreeRoom and GridMaze (SUN and Random, seed 0), ThreeRoom's seed 1 in another report added to it:
    ``whole``, as reports are written now, their runs kept beside them, else as reports written before the archive.
    Returns the study's folder, its curves_grid.png before, its study.md and ThreeRoom's report.md after."""
    out, more = tmp_path / "study", tmp_path / "more"
    study = {THREE_ROOM: {"sun": [flat("ThreeRoom", "sun", 0, 0.6)], "random": [flat("ThreeRoom", "random", 0, 0.4)]},
             "sun_lightning/GridMaze-v0": {"sun": [flat("GridMaze", "sun", 0, 0.5)],
                                           "random": [flat("GridMaze", "random", 0, 0.5)]}}
    reports = {env: f"{env.split('/')[1][:-3]}/report.md" for env in study}
    for env, runs in study.items():
        write_report(out / reports[env].split("/")[0], env, runs, {}, ["context", "Cells: as now."])
    write_study(out, study, ["2 environments, context line."], reports)
    write_report(more / "ThreeRoom", THREE_ROOM, {"sun": [flat("ThreeRoom", "sun", 1, 0.8)],
                                                  "random": [flat("ThreeRoom", "random", 1, 0.4)]}, {}, ["c"])
    if not whole:
        for kept in [*out.glob("*/runs.json.gz"), *more.glob("*/runs.json.gz")]:
            kept.unlink()
    curves = (out / "curves_grid.png").read_bytes()
    assert main([str(out), "--add", str(more)]) == 0
    text = (out / "study.md").read_text()
    # ThreeRoom: SUN 0.6 and 0.8 (the range, two seeds), Random 0.4 twice; GridMaze as before
    assert "| [ThreeRoom](ThreeRoom/report.md) | SUN adaptive | 2 | 0.700 [0.600, 0.800] (n = 2) |" in text
    assert "| [GridMaze](GridMaze/report.md) | SUN adaptive | 1 | 0.500 (n = 1) |" in text
    # averaged over the two environments: (0.7 + 0.5) / 2 against (0.4 + 0.5) / 2, +33.3 %
    assert "| SUN adaptive | 2 | +33.3 % [" in text
    return out, curves, text, (out / "ThreeRoom" / "report.md").read_text()


def test_a_study_of_earlier_reports_restated_with_added_runs_keeps_its_curves_and_redraws_its_tables(tmp_path):
    out, curves, text, report = _restated_study(tmp_path, whole=False)
    assert (out / "curves_grid.png").read_bytes() == curves and "![coverage and entropy per environment]" in text
    assert text.splitlines()[2:4] == ["2 environments, context line.", STUDY_RESTATED]
    assert f"{ADDED} ThreeRoom-sun-seed1, ThreeRoom-random-seed1." in report
    assert main([str(out)]) == 0 and (out / "study.md").read_text() == text  # restated again: the same


def test_a_study_of_whole_runs_is_drawn_again_with_the_added_runs(tmp_path):
    out, curves, text, report = _restated_study(tmp_path, whole=True)
    assert (out / "curves_grid.png").read_bytes() != curves and STUDY_RESTATED not in text
    assert ADDED not in report and report.splitlines()[2:4] == ["context", "Cells: as now."]
    kept = read_archive(out / "ThreeRoom")  # the added runs joined the archive, histories and all
    assert sorted(kept) == ["ThreeRoom-random-seed0", "ThreeRoom-random-seed1", "ThreeRoom-sun-seed0",
                            "ThreeRoom-sun-seed1"]
    assert kept["ThreeRoom-sun-seed1"].histories[COV] == ([1000, 2000], [0.8, 0.8])


def test_a_reports_runs_and_snapshots_are_kept_and_read_back(tmp_path):
    record = flat("ThreeRoom", "sun", 3, 0.7, minutes=12.5)
    record.final[CPU_SHARE] = float("nan")  # resumed from before the clock
    record.hardware = "cpu (AMD EPYC, 2 cores)"
    image = np.zeros((9, 8))
    image[1, 1] = 1.0
    stages = {p: HeatmapSnapshot(THREE_ROOM, 20 * p, p, image * 5, image * p, image) for p in (25, 50, 75, 100)}
    written = write_report(tmp_path, THREE_ROOM, {"sun": [record]}, {"sun": stages[100]}, ["context"],
                           stages={"sun": stages})
    assert {p.name for p in written} >= {"runs.json.gz", "ThreeRoom-sun-seed3_025.npz", "ThreeRoom-sun-seed3_100.npz"}
    (back,) = read_archive(tmp_path).values()
    assert (back.name, back.run_id, back.method, back.seed, back.goals_selected, back.hardware) == (
        record.name, record.run_id, "sun", 3, 10.0, "cpu (AMD EPYC, 2 cores)")
    assert back.histories == {COV: ([1000, 2000], [0.7, 0.7]), ENT: ([1000, 2000], [0.7, 0.7])}
    assert back.final[MINUTES] == 12.5 and np.isnan(back.final[CPU_SHARE])
    saved = read_stages(tmp_path, record.name)
    assert sorted(saved) == [25, 50, 75, 100] and saved[50].selected[1, 1] == 50 and saved[75].frames == 1500
    # drawn again from what it keeps: the heatmaps and goal stages too
    heatmaps = (tmp_path / "heatmaps.png").stat().st_size
    (tmp_path / "heatmaps.png").unlink()
    (tmp_path / "goal_stages.png").unlink()
    kept = (tmp_path / "runs.json.gz").read_bytes()
    restate(tmp_path)
    assert (tmp_path / "heatmaps.png").stat().st_size == heatmaps and (tmp_path / "goal_stages.png").is_file()
    # the same runs kept again are the same bytes (no timestamp): a restate leaves a committed archive unchanged
    assert (tmp_path / "runs.json.gz").read_bytes() == kept


@pytest.mark.parametrize("whole", [True, False])
def test_a_new_environments_report_joins_a_study_as_its_own_folder(tmp_path, whole):
    """A study of ThreeRoom (SUN 0.6, Random 0.4) gains MountainCar (SUN 0.3, Random 0.4) from another study: its
    report is copied whole, study.md links it, counts two environments and averages both."""
    out, more = tmp_path / "study", tmp_path / "more"
    three_room = {"sun": [flat("ThreeRoom", "sun", 0, 0.6)], "random": [flat("ThreeRoom", "random", 0, 0.4)]}
    write_report(out / "ThreeRoom", THREE_ROOM, three_room, {}, ["c"])
    write_study(out, {THREE_ROOM: three_room}, ["1 environments, context line."], {THREE_ROOM: "ThreeRoom/report.md"})
    write_report(more / "MountainCar", MOUNTAIN_CAR, {"sun": [flat("MountainCar", "sun", 0, 0.3)],
                                                      "random": [flat("MountainCar", "random", 0, 0.4)]}, {}, ["m"])
    if not whole:
        for kept in [*out.glob("*/runs.json.gz"), *more.glob("*/runs.json.gz")]:
            kept.unlink()
    assert main([str(out), "--add", str(more)]) == 0
    text = (out / "study.md").read_text()
    assert (out / "MountainCar" / "report.md").is_file() and (out / "MountainCar" / "runs.csv").read_text() == (
        more / "MountainCar" / "runs.csv").read_text()
    assert "2 environments, context line." in text and "1 environments" not in text
    assert "| [MountainCar](MountainCar/report.md) | SUN adaptive | 1 | 0.300 (n = 1) |" in text
    # averaged over the two environments: (0.6 + 0.3) / 2 against (0.4 + 0.4) / 2, +12.5 %
    assert "| SUN adaptive | 2 | +12.5 % (" in text
    assert main([str(out), "--add", str(more)]) == 0 and (out / "study.md").read_text() == text  # added again: the same
    (out / "MountainCar" / "runs.csv").unlink()
    (out / "MountainCar" / "report.md").rename(out / "MountainCar" / "old.md")
    with pytest.raises(RestateError, match="MountainCar is in the way"):
        restate_study(out, [more])



def test_lunar_lander_full_joining_a_study_of_earlier_reports_gets_its_knn_curve(tmp_path):
    """ThreeRoom's runs known by runs.csv alone keep the study's curves as drawn; LunarLanderFull's, kept whole with
    their k-NN entropy over training, draw knn_entropy.png."""
    out, more = tmp_path / "study", tmp_path / "more"
    three_room = {"sun": [flat("ThreeRoom", "sun", 0, 0.6)], "random": [flat("ThreeRoom", "random", 0, 0.4)]}
    write_report(out / "ThreeRoom", THREE_ROOM, three_room, {}, ["c"])
    write_study(out, {THREE_ROOM: three_room}, ["1 environments, context line."], {THREE_ROOM: "ThreeRoom/report.md"})
    (out / "ThreeRoom" / "runs.json.gz").unlink()
    curves = (out / "curves_grid.png").read_bytes()
    full = {}
    for method, level in (("sun", -10.0), ("random", -12.0)):
        record = flat("LunarLanderFull", method, 0, 0.01)
        record.histories[KNN] = ([1000, 2000], [level - 1, level])
        full[method] = [record]
    write_report(more / "LunarLanderFull", "sun_lightning/LunarLanderFull-v0", full, {}, ["f"])
    assert main([str(out), "--add", str(more)]) == 0
    text = (out / "study.md").read_text()
    assert (out / "curves_grid.png").read_bytes() == curves and STUDY_RESTATED in text
    assert (out / "knn_entropy.png").read_bytes()[:4] == b"\x89PNG" and "](knn_entropy.png)" in text


def test_a_report_and_a_study_state_the_seeds_they_hold_not_those_asked_for(tmp_path):
    """A report asked for seeds 0 and 1 whose seed 1 has not run yet says seed 0; with seed 1 added, both."""
    records = [flat("ThreeRoom", "sun", 0, 0.6), flat("ThreeRoom", "random", 0, 0.4)]
    assert state_seeds("`x`, seeds 0, 1, 40000 env frames per run.", records) == "`x`, seeds 0, 40000 env frames per run."
    assert state_seeds("`x`, seeds 0, 1, 40000 / 50000 env frames per run.", records[:1]) == (
        "`x`, seeds 0, 40000 / 50000 env frames per run.")
    assert state_seeds("3 environments, experiment `e`, seeds 0, 1, 2.", records) == "3 environments, experiment `e`, seeds 0."
    assert state_seeds("2 environments, seeds 4, budgets × 0.5.", records) == "2 environments, seeds 0, budgets × 0.5."
    assert state_seeds("context", records) == "context" and state_seeds("seeds 0, 1.", []) == "seeds 0, 1."
    out, more = tmp_path / "study", tmp_path / "more"
    write_report(out / "ThreeRoom", THREE_ROOM, {"sun": records[:1], "random": records[1:]}, {},
                 ["`ThreeRoom`, seeds 0, 1, 2000 env frames per run.", "Cells: as now."])
    write_study(out, {THREE_ROOM: {"sun": records[:1], "random": records[1:]}},
                ["1 environments, MLflow experiment `e`, seeds 0, 1."], {THREE_ROOM: "ThreeRoom/report.md"})
    restate_study(out)
    assert (out / "ThreeRoom" / "report.md").read_text().splitlines()[2] == "`ThreeRoom`, seeds 0, 2000 env frames per run."
    assert (out / "study.md").read_text().splitlines()[2] == "1 environments, MLflow experiment `e`, seeds 0."
    write_report(more / "ThreeRoom", THREE_ROOM, {"sun": [flat("ThreeRoom", "sun", 1, 0.8)]}, {}, ["c"])
    restate_study(out, [more])
    assert (out / "ThreeRoom" / "report.md").read_text().splitlines()[2] == (
        "`ThreeRoom`, seeds 0, 1, 2000 env frames per run.")
    assert (out / "study.md").read_text().splitlines()[2] == "1 environments, MLflow experiment `e`, seeds 0, 1."
