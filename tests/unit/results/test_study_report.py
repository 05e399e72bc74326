"""The study report of a small fixed study: averaged improvements with intervals, SUN's probability of improvement
and IQM per baseline, the runtime table."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from sun_lightning.results.runs import MINUTES, RunRecord
from sun_lightning.results.study import aggregates, write_study
from sun_lightning.results.labels import label
from sun_lightning.results.report import summarize

COV, ENT = "explore/visits/coverage", "explore/visits/entropy"
THREE_ROOM, MOUNTAIN_CAR = "sun_lightning/ThreeRoom-v0", "sun_lightning/MountainCar-v0"


def flat(env: str, method: str, seed: int, auc: float, minutes: float = 1.0) -> RunRecord:
    """A run whose coverage and entropy stay at ``auc`` (so its AUCs are ``auc``)."""
    curve = ([1000, 2000], [auc, auc])
    return RunRecord(f"{env}-{method}-seed{seed}", f"{env}-{method}-{seed}", method, seed,
                     {COV: auc, ENT: auc, MINUTES: minutes}, {COV: curve, ENT: curve}, 10.0 if method != "random" else 0.0)


#: env → method → per-seed AUCs: SUN beats Random on ThreeRoom in every pair, ties on MountainCar (2 of 4 pairs won).
AUCS = {THREE_ROOM: {"sun": [0.6, 0.7], "random": [0.4, 0.5]},
        MOUNTAIN_CAR: {"sun": [0.3, 0.5], "random": [0.4, 0.4]}}


def small_study() -> dict[str, dict[str, list[RunRecord]]]:
    return {env: {m: [flat(env.split("/")[1][:-3], m, s, a) for s, a in enumerate(values)]
                  for m, values in methods.items()} for env, methods in AUCS.items()}


def test_sun_against_each_baseline_by_hand():
    summaries = {env: summarize(runs) for env, runs in small_study().items()}
    cells = aggregates(summaries)["coverage AUC vs Random"]
    # ThreeRoom: all 4 pairs won → 1; MountainCar: 0.3 loses twice, 0.5 wins twice → 0.5; mean 0.75
    assert cells["envs"] == 2 and cells["P(improvement)"].value == pytest.approx(0.75)
    # normalized by Random's mean (0.45, 0.4): 1.333, 1.556, 0.75, 1.25 → IQM of four: the middle two, 1.25 and 1.333
    assert cells["IQM normalized"].value == pytest.approx(np.mean([1.25, 0.6 / 0.45]))
    assert cells["P(improvement)"].low < 0.75 < cells["P(improvement)"].high <= 1


def test_the_study_report_gives_intervals_everywhere(tmp_path):
    written = write_study(tmp_path, small_study(), ["context"], {THREE_ROOM: "ThreeRoom/report.md"})
    assert {p.name for p in written} >= {"study.md", "study.csv", "curves_grid.png", "improvement_bars.png"}
    text = (tmp_path / "study.md").read_text()
    # (0.65 + 0.4) / 2 = 0.525 against (0.45 + 0.4) / 2 = 0.425: +23.5 %, four samples of two seeds each
    assert "| SUN adaptive | 2 | +23.5 % [" in text and "(n = 2 each (4 samples)) |" in text
    assert "| coverage AUC vs Random | 2 | 0.750 [" in text
    assert "| [ThreeRoom](ThreeRoom/report.md) | SUN adaptive | 2 | 0.650 [0.600, 0.700] (n = 2) |" in text
    assert "| ThreeRoom | 1.0 [1.0, 1.0] (n = 2) | 1.0 [1.0, 1.0] (n = 2) |" in text  # the runtime table
    row = next(r for r in csv.DictReader(open(tmp_path / "study.csv")) if r["method"] == "sun")
    assert float(row["coverage_auc_vs_random_pct"]) == pytest.approx(100 * 0.1 / 0.425, rel=1e-5)
    assert float(row["coverage_auc_vs_random_pct_ci_low"]) < float(row["coverage_auc_vs_random_pct"])


def test_sun_against_its_ablations_reads_each_interval(tmp_path):
    # SUN 0.6 | 0.7 on both envs; the additive ablation 0.3 | 0.4 (SUN beats it), novelty-only 0.6 | 0.7 on one env and
    # 0.5 | 0.8 on the other (a tie), ρ = 0.5 0.9 | 1.0 (SUN loses); Random is no ablation of SUN
    seeds = {"sun": [0.6, 0.7], "sun_additive": [0.3, 0.4], "rho=0.5": [0.9, 1.0], "random": [0.5, 0.5]}
    study = {env: {m: [flat(env.split("/")[1][:-3], m, s, a) for s, a in enumerate(values)] for m, values in
                   {**seeds, "novelty_only": [0.6, 0.7] if env == THREE_ROOM else [0.5, 0.8]}.items()}
             for env in (THREE_ROOM, MOUNTAIN_CAR)}
    write_study(tmp_path, study)
    section = (tmp_path / "study.md").read_text().split("## SUN adaptive against its ablations and variants")[1]
    rows = [line for line in section.split("\n\n## ")[0].splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == [f"| {label('sun_additive')}", "| rho=0.5", f"| {label('novelty_only')}"]
    additive, rho, novelty = rows
    # (0.65 − 0.35) / 0.35 = +85.7 % in both AUCs, every resample of the seeds above 0
    assert additive.count("+85.7 % [") == 2 and additive.count(": SUN beats") == 2 and " | 2 | " in additive
    # (0.65 − 0.95) / 0.95 = −31.6 %
    assert rho.count("-31.6 % [") == 2 and rho.count(": SUN loses") == 2
    # 0.65 against (0.65 + 0.65) / 2: +0.0 %, and novelty-only's MountainCar seeds 0.5 | 0.8 take the interval across 0
    assert novelty.count("+0.0 % [") == 2 and novelty.count(": SUN ties") == 2


def test_sun_by_family_and_lunar_lander_full_out_of_every_average(tmp_path):
    # ThreeRoom (a gridworld): SUN 0.6 | 0.7 against Random 0.4 | 0.5; MountainCar (classic control): 0.3 | 0.5
    # against 0.4 | 0.4; LunarLanderFull, where SUN is far behind (0.01 against 0.5), counts in no average
    study = small_study()
    full = "sun_lightning/LunarLanderFull-v0"
    study[full] = {m: [flat("LunarLanderFull", m, s, a) for s in (0, 1)] for m, a in (("sun", 0.01), ("random", 0.5))}
    write_study(tmp_path, study)
    text = (tmp_path / "study.md").read_text()
    # the average as without it: +23.5 %, over 2 environments; P(improvement) 0.75; in study.csv too
    assert "| SUN adaptive | 2 | +23.5 % [" in text and "| coverage AUC vs Random | 2 | 0.750 [" in text
    assert "LunarLanderFull: not in this or any average below" in text
    assert "| LunarLanderFull | SUN adaptive | 2 | 0.0100 [" in text  # its own numbers stay
    row = next(r for r in csv.DictReader(open(tmp_path / "study.csv")) if r["method"] == "sun")
    assert row["envs"] == "2" and float(row["coverage_auc_vs_random_pct"]) == pytest.approx(100 * 0.1 / 0.425, rel=1e-5)
    # by family: Gridworlds (0.65 − 0.45) / 0.45 = +44.4 %, Classic control (0.4 − 0.4) / 0.4 = +0.0 %
    assert "| Gridworlds | 1 | +44.4 % [" in text and "| Classic control | 1 | +0.0 % [" in text
    # one family alone: no family table
    write_study(tmp_path / "one", {THREE_ROOM: study[THREE_ROOM]})
    assert "by family of environments" not in (tmp_path / "one" / "study.md").read_text()
