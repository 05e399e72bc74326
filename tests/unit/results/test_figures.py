"""The paper's figures the reports draw, each from a small fixed study of synthetic runs: the goal-statistics grid,
the goal-statistic curves, the absolute AUC bars with the average over environments (LunarLanderFull apart),
LunarLanderFull's k-NN entropy curve, and Pendulum's and Acrobot's heatmaps as angles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sun_lightning.results.auc_bars import auc_bars, auc_table
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.goal_stages import goal_stages_figure
from sun_lightning.results.report import write_report
from sun_lightning.results.runs import RunRecord
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.results.study import write_study

COV, ENT, KNN = "explore/visits/coverage", "explore/visits/entropy", "explore/visits/knn_entropy"
SUCCESS, RESELECT = "explore/goals/success", "explore/goals/reselection_rate"
THREE_ROOM, FULL = "sun_lightning/ThreeRoom-v0", "sun_lightning/LunarLanderFull-v0"
PNG = b"\x89PNG\r\n\x1a\n"


def flat(env_id: str, method: str, seed: int, auc: float, extra: dict | None = None) -> RunRecord:
    """A run whose coverage and entropy stay at ``auc`` over 1000 and 2000 frames, with ``extra`` curves."""
    curve = ([1000, 2000], [auc, auc])
    histories = {COV: curve, ENT: curve, **(extra or {})}
    final = {name: values[-1] for name, (_, values) in histories.items()}
    return RunRecord(f"{env_id}-{method}-seed{seed}", f"{env_id}-{method}-{seed}", method, seed, final, histories,
                     0.0 if method == "random" else 10.0)


def test_auc_bars_average_leaves_lunar_lander_full_out():
    study = {THREE_ROOM: {"sun": [flat(THREE_ROOM, "sun", 0, 0.6), flat(THREE_ROOM, "sun", 1, 0.8)],
                          "random": [flat(THREE_ROOM, "random", 0, 0.5)]},
             "sun_lightning/MountainCar-v0": {"sun": [flat("mc", "sun", 0, 0.2)],
                                              "random": [flat("mc", "random", 0, 0.1)]},
             FULL: {"sun": [flat(FULL, "sun", 0, 0.01)], "random": [flat(FULL, "random", 0, 0.02)]}}
    table = auc_table(study, COV)
    assert set(table["sun"]) == {"ThreeRoom", "MountainCar", "LunarLanderFull", "average (2 envs)"}
    # (0.7 + 0.2) / 2: LunarLanderFull's 0.01 is not in it; SUN's ThreeRoom seeds 0.6 | 0.7 | 0.8 → 0.4 | 0.45 | 0.5
    average = table["sun"]["average (2 envs)"]
    assert average.value == pytest.approx(0.45) and (average.low, average.high) == (pytest.approx(0.4), pytest.approx(0.5))
    assert table["random"]["average (2 envs)"].value == pytest.approx(0.3) and table["random"]["ThreeRoom"].low is None
    fig = auc_bars(study, {COV: "coverage AUC", ENT: "entropy AUC"}, "t")
    coverage_ax = fig.axes[0]
    assert [t.get_text() for t in coverage_ax.get_xticklabels()] == ["ThreeRoom", "MountainCar", "LunarLanderFull",
                                                                    "average (2 envs)"]
    heights = sorted(round(p.get_height(), 6) for p in coverage_ax.patches)
    assert heights == [0.01, 0.02, 0.1, 0.2, 0.3, 0.45, 0.5, 0.7]


def snapshot(percent: int, selected: float, reached: float) -> HeatmapSnapshot:
    image = np.zeros((9, 8))
    image[1, 1] = 1.0
    return HeatmapSnapshot(THREE_ROOM, 20 * percent, percent, image * 5, image * selected, image * reached)


def test_the_goal_statistics_grid_is_methods_by_stages():
    runs = {"SUN": {p: snapshot(p, p, p / 2) for p in (25, 50, 75, 100)},
            "DISCOVER": {p: snapshot(p, 2 * p, 0) for p in (25, 50, 75, 100)}}
    fig = goal_stages_figure(GoalGrid.of(THREE_ROOM), runs, "t")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2 * 2 * 4  # methods × (selected, reached) × stages
    titles = [ax.get_title() for ax in panels]
    assert titles[0] == "SUN: goals selected\n25 % (500 frames): 25" and titles[4] == "SUN: goals reached\n25 % (500 frames): 12"
    assert titles[11] == "DISCOVER: goals selected\n100 % (2000 frames): 200"
    # one log colour range per row kind: selected up to DISCOVER's 200, reached up to SUN's 50
    assert panels[0].images[0].norm.vmax == 200 and panels[4].images[0].norm.vmax == 50
    assert np.nanmax(panels[11].images[0].get_array()) == 200
    # a colour bar beside each row, level with it: none spans another row (they overlapped with two methods)
    fig.canvas.draw()
    bars = [ax for ax in fig.axes if not ax.get_title()]
    assert len(bars) == 4
    rows = [panels[4 * r].get_position() for r in range(4)]
    for row, bar in zip(rows, sorted(bars, key=lambda ax: -ax.get_position().y0)):
        y0, y1 = bar.get_position().y0, bar.get_position().y1
        assert row.y0 - 0.02 <= y0 < y1 <= row.y1 + 0.02


def test_the_report_draws_goal_curves_and_stages_where_runs_have_them(tmp_path):
    goals = {SUCCESS: ([1000, 2000], [0.2, 0.6]), RESELECT: ([1000, 2000], [0.1, 0.05])}
    runs = {"sun": [flat(THREE_ROOM, "sun", 0, 0.6, goals), flat(THREE_ROOM, "sun", 1, 0.7, goals)],
            "random": [flat(THREE_ROOM, "random", 0, 0.5)]}
    stages = {"sun": {p: snapshot(p, p, p / 2) for p in (25, 50, 75, 100)}}
    written = write_report(tmp_path, THREE_ROOM, runs, {"sun": stages["sun"][100]}, stages=stages)
    assert {"goal_curves.png", "goal_stages.png"} <= {p.name for p in written}
    assert all((tmp_path / name).read_bytes()[:8] == PNG for name in ("goal_curves.png", "goal_stages.png"))
    text = (tmp_path / "report.md").read_text()
    assert "![goal statistics against env frames](goal_curves.png)" in text
    assert "![goals selected and reached at 25/50/75/100 % of training](goal_stages.png)" in text
    # Random selects no goals: no goal curves or stages of its own; without goal statistics, no figures
    plain = write_report(tmp_path / "plain", THREE_ROOM, {"random": runs["random"]}, {})
    assert not {"goal_curves.png", "goal_stages.png"} & {p.name for p in plain}


def test_lunar_lander_full_gets_its_knn_entropy_curve(tmp_path):
    def knn(level):
        return {KNN: ([1000, 2000, 3000], [level - 1, level - 0.5, level])}

    study = {THREE_ROOM: {"sun": [flat(THREE_ROOM, "sun", 0, 0.6)], "random": [flat(THREE_ROOM, "random", 0, 0.5)]},
             FULL: {"sun": [flat(FULL, "sun", s, 0.01, knn(-10.0 + s)) for s in (0, 1)],
                    "random": [flat(FULL, "random", 0, 0.01, knn(-12.0))]}}
    written = {p.name for p in write_study(tmp_path, study)}
    assert {"auc_bars.png", "knn_entropy.png"} <= written
    text = (tmp_path / "study.md").read_text()
    assert "(knn_entropy.png)" in text and "(auc_bars.png)" in text
    # the env report draws k-NN entropy as a curve beside coverage and entropy once it is logged over training
    write_report(tmp_path / "full", FULL, study[FULL], {})
    assert "coverage and entropy and k-NN entropy against env frames" in (tmp_path / "full/report.md").read_text()


def test_pendulum_and_acrobot_are_drawn_as_angles():
    pendulum = GoalGrid.of("sun_lightning/Pendulum-v0")
    assert (pendulum.low, pendulum.high) == ((-math.pi, -8.0), (math.pi, 8.0))
    assert pendulum.axis_labels == ("θ (rad)", "θ̇ (rad/s)")
    goal = torch.tensor([math.cos(2.5), math.sin(2.5), -4.0])
    assert pendulum.position(goal) == (pytest.approx(2.5), pytest.approx(-4.0))
    # θ = 2.5 is bin ⌊(2.5 + π) / (2π) · 50⌋ = 44, θ̇ = −4 bin ⌊4 / 16 · 50⌋ = 12: cell 12 · 50 + 44
    assert int(pendulum.cells(goal.reshape(1, -1))[0]) == 12 * 50 + 44
    acrobot = GoalGrid.of("sun_lightning/Acrobot-v0")
    goal = torch.tensor([math.cos(-1.0), math.sin(-1.0), math.cos(3.0), math.sin(3.0)])
    assert acrobot.position(goal) == (pytest.approx(-1.0), pytest.approx(3.0))
    assert acrobot.axis_labels == ("θ₁ (rad)", "θ₂ (rad)")
    # the goal-statistics grid names the angles on its axes
    image = pendulum.histogram(torch.stack([goal[:3] * 0 + torch.tensor([1.0, 0.0, 0.0])]))
    fig = goal_stages_figure(pendulum, {"SUN": {100: HeatmapSnapshot("sun_lightning/Pendulum-v0", 10, 100, image,
                                                                     image, image)}}, "t")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert panels[0].get_ylabel() == "θ̇ (rad/s)" and panels[1].get_xlabel() == "θ (rad)"
    assert panels[0].images[0].get_array()[25, 25] == 1  # θ = 0, θ̇ = 0: the centre bin
    # other spaces keep their first two goal dimensions
    mountain = GoalGrid.of("sun_lightning/MountainCar-v0")
    assert mountain.position(torch.tensor([-0.5, 0.01])) == (pytest.approx(-0.5), pytest.approx(0.01))
