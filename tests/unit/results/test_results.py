"""Results a researcher can look at: AUC, relative improvement, report tables, heatmap geometry and maps."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tests.helpers import THREE_ROOM, TableLearner, filled_replay, one_hot
from sun_lightning import keys
from sun_lightning.envconfig.layout import LAYOUTS
from sun_lightning.envs.registry import goal_space
from sun_lightning.goals import SUNAdaptive
from sun_lightning.metrics.auc import curve_auc
from sun_lightning.replay.storage import GoalReplayStorage
from sun_lightning.results.goal_grid import BINS, GoalGrid
from sun_lightning.results.relative import relative_improvement
from sun_lightning.results.report import Stat, relative_table, summarize, write_report
from sun_lightning.results.runs import RunRecord
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.results.value_maps import score_map, start_observation, value_map

MOUNTAIN_CAR = "sun_lightning/MountainCar-v0"
COV, ENT = "explore/visits/coverage", "explore/visits/entropy"


# ---- AUC and the paper's relative improvement ------------------------------------------------------
def test_auc_is_the_mean_height_of_the_curve_by_hand():
    # trapezoids over [0, 1000] and [1000, 2000]: (0 + 0.5)/2 · 1000 + (0.5 + 1)/2 · 1000 = 1000, over 2000 frames
    assert curve_auc([0, 1000, 2000], [0.0, 0.5, 1.0]) == pytest.approx(0.5)
    assert curve_auc([2000, 0, 1000], [1.0, 0.0, 0.5]) == pytest.approx(0.5)  # any order
    # unequal spacing: (0.2 + 0.4)/2 · 1000 + (0.4 + 0.4)/2 · 3000 = 300 + 1200, over 4000
    assert curve_auc([1000, 2000, 5000], [0.2, 0.4, 0.4]) == pytest.approx(1500 / 4000)
    assert curve_auc([500], [0.7]) == 0.7


def test_relative_improvement_is_the_papers_ratio_of_aucs():
    assert relative_improvement(0.6, 0.5) == pytest.approx(20.0)
    assert relative_improvement(0.45, 0.5) == pytest.approx(-10.0)
    assert relative_improvement(0.6, 0.0) is None and relative_improvement(None, 0.5) is None
    # The paper's table is consistent with this definition: SUN adaptive (+15.1 %, +21.0 %, +67.1 %) over
    # SUN additive (+2.5 %, +7.9 %, +48.9 %) is the same ratio against each baseline, to rounding.
    ratios = [(1 + a / 100) / (1 + b / 100) for a, b in ((15.1, 2.5), (21.0, 7.9), (67.1, 48.9))]
    assert max(ratios) - min(ratios) < 0.003


# ---- the report's tables -------------------------------------------------------------------------------
def _record(method: str, seed: int, coverage: list[float], entropy: list[float], goals: float = 10.0,
            success: float = 0.5) -> RunRecord:
    steps = [1000 * (i + 1) for i in range(len(coverage))]
    final = {COV: coverage[-1], ENT: entropy[-1], "explore/goals/success": 0.0 if not goals else success}
    return RunRecord(f"ThreeRoom-{method}-seed{seed}", f"id-{method}-{seed}", method, seed, final,
                     {COV: (steps, coverage), ENT: (steps, entropy)}, goals)


def _first_table(markdown: str) -> dict[str, list[str]]:
    """Label → cells of the first Markdown table's rows."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.split("|")[1:-1]]
        rows[cells[0]] = cells[1:]
    return rows


def test_report_gives_mean_interval_n_and_relative_improvements_by_hand(tmp_path):
    runs = {
        # AUCs: coverage (0.2 + 0.6)/2 = 0.4 and 0.6 → 0.5 [0.4, 0.6]; entropy 0.6 and 0.8 → 0.7 [0.6, 0.8]
        "sun": [_record("sun", 0, [0.2, 0.6], [0.5, 0.7]), _record("sun", 1, [0.4, 0.8], [0.7, 0.9], success=0.7)],
        "adagoal": [_record("adagoal", 0, [0.2, 0.4], [0.4, 0.6])],  # AUCs 0.3 and 0.5, one seed
        "random": [_record("random", 0, [0.1, 0.3], [0.3, 0.5], goals=0.0)],  # AUCs 0.2 and 0.4, no goals
        "discover": [],  # not run
    }
    summary = summarize(runs)
    sun = summary["sun"]
    assert sun["coverage AUC"].mean == pytest.approx(0.5) and sun["coverage AUC"].std == pytest.approx(0.1 * 2 ** 0.5)
    # two seeds: the 95 % interval of the mean is their range (test_intervals.py)
    assert (sun["coverage AUC"].low, sun["coverage AUC"].high) == (pytest.approx(0.4), pytest.approx(0.6))
    assert sun["goal success"].mean == pytest.approx(0.6) and sun["coverage"].n == 2
    assert summary["adagoal"]["entropy AUC"] == Stat(pytest.approx(0.5), None, None, 1)
    assert summary["random"]["goal success"] is None  # Random selects no goals: n/a, not 0
    assert all(stat is None for stat in summary["discover"].values())
    assert "k-NN entropy" not in sun  # no run logged it
    relative = relative_table(summary)
    assert set(relative["sun"]) == {"coverage AUC vs AdaGoal", "coverage AUC vs Random",
                                    "entropy AUC vs AdaGoal", "entropy AUC vs Random"}  # DISCOVER was not run
    vs_adagoal = relative["sun"]["coverage AUC vs AdaGoal"]
    assert vs_adagoal.value == pytest.approx(100 * (0.5 - 0.3) / 0.3)
    # AdaGoal's one seed is held at 0.3; SUN's two resample to 0.4 | 0.5 | 0.6: the interval is +33.3 % to +100 %
    assert (vs_adagoal.low, vs_adagoal.high, vs_adagoal.n) == (pytest.approx(100 / 3), pytest.approx(100.0), (2, 1))
    assert relative["sun"]["entropy AUC vs Random"].value == pytest.approx(100 * (0.7 - 0.4) / 0.4)
    assert relative["random"]["coverage AUC vs Random"] is None

    snapshot = HeatmapSnapshot(THREE_ROOM, 2000, 100, np.ones((9, 8)), np.zeros((9, 8)), np.zeros((9, 8)))
    written = write_report(tmp_path, THREE_ROOM, runs, {"sun": snapshot, "random": snapshot}, ["context"])
    assert {p.name for p in written} == {"curves.png", "heatmaps.png", "report.md", "summary.csv", "runs.csv",
                                         "runs.json.gz"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written if p.suffix == ".png")
    rows = _first_table((tmp_path / "report.md").read_text())
    assert rows["SUN adaptive"][:6] == ["2", "2000", "0.700 [0.600, 0.800] (n = 2)", "0.800 [0.700, 0.900] (n = 2)",
                                        "0.500 [0.400, 0.600] (n = 2)", "0.700 [0.600, 0.800] (n = 2)"]
    # n = 1: the value and its n, no interval
    assert rows["AdaGoal"][:6] == ["1", "2000", "0.400 (n = 1)", "0.600 (n = 1)", "0.300 (n = 1)", "0.500 (n = 1)"]
    assert "+66.7 % [+33.3, +100.0] (n = 2 / 1)" in (tmp_path / "report.md").read_text()
    assert rows["Random"][-1] == "n/a" and rows["DISCOVER"][0] == "0"
    summary_csv = {row["method"]: row for row in csv.DictReader(open(tmp_path / "summary.csv"))}
    assert float(summary_csv["sun"]["coverage_auc_vs_adagoal_pct"]) == pytest.approx(66.6667, rel=1e-5)
    assert float(summary_csv["sun"]["coverage_auc_vs_adagoal_pct_ci_high"]) == pytest.approx(100.0)
    assert float(summary_csv["sun"]["coverage_auc_ci_low"]) == pytest.approx(0.4) and summary_csv["sun"]["coverage_auc_n"] == "2"
    assert summary_csv["random"]["goal_success_mean"] == "n/a" and summary_csv["adagoal"]["coverage_std"] == "n/a"
    assert len(list(csv.DictReader(open(tmp_path / "runs.csv")))) == 4


# ---- where goals are drawn -------------------------------------------------------------------------------
def test_gridworld_grids_draw_walls_and_row_walls():
    three = GoalGrid.of(THREE_ROOM)
    assert three.tiles and three.shape == (9, 8) and three.row_walls == (3, 6) and not three.wall.any()
    four = GoalGrid.of("sun_lightning/FourRoomStuck-v0")
    assert four.row_walls == () and int(four.wall.sum()) == int((LAYOUTS["FourRoomStuck"].chars == "W").sum())
    # a goal's image cell is its tile: (row 2, col 5) of ThreeRoom
    assert three.histogram(one_hot([2 * 8 + 5, 2 * 8 + 5], 72))[2, 5] == 2


def test_continuous_grids_bin_the_first_two_goal_dimensions():
    grid = GoalGrid.of(MOUNTAIN_CAR)  # x ∈ [−1.2, 0.6], ẋ ∈ [−0.07, 0.07] (SPEC §6)
    assert not grid.tiles and grid.shape == (BINS, BINS) and grid.extent == (-1.2, 0.6, -0.07, 0.07)
    goals = torch.tensor([[-1.2, -0.07], [0.6, 0.07], [-0.28, 0.001], [-0.28, 0.001]])
    image = grid.histogram(goals)
    # x along columns, ẋ along rows (origin lower): the corners, and x = −0.28 → bin ⌊0.92/1.8 · 50⌋ = 25,
    # ẋ = 0.001 → bin ⌊0.071/0.14 · 50⌋ = 25
    assert image[0, 0] == 1 and image[BINS - 1, BINS - 1] == 1 and image[25, 25] == 2 and image.sum() == 4
    centres = grid.centres()
    assert centres[25 * BINS + 25].tolist() == pytest.approx([-1.2 + 25.5 * 1.8 / BINS, -0.07 + 25.5 * 0.14 / BINS])
    assert np.isnan(grid.maximum(goals[:1], torch.tensor([3.0]))[1, 1])


# ---- V(s₀, g) and the selection score ---------------------------------------------------------------------
class _LinearLearner:
    """V(s, g) = (x_g + 1.2) / 1.8 on MountainCar, whatever the state and goal action."""

    device = torch.device("cpu")

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        return (goal[..., 0] + 1.2) / 1.8, None


def test_value_map_reads_the_learner_over_the_grid():
    grid = GoalGrid.of(MOUNTAIN_CAR)
    values = value_map(_LinearLearner(), grid, torch.zeros(2))
    x = -1.2 + (np.arange(BINS) + 0.5) * 1.8 / BINS
    assert values == pytest.approx(np.tile((x + 1.2) / 1.8, (BINS, 1)), abs=1e-6)  # constant along ẋ (rows)

    space = goal_space(THREE_ROOM)
    learner = TableLearner(space.obs_dim)
    learner.table[10] = torch.linspace(0, 1, space.obs_dim)
    tiles = value_map(learner, GoalGrid.of(THREE_ROOM), one_hot(10, space.obs_dim))
    assert tiles == pytest.approx(torch.linspace(0, 1, space.obs_dim).view(9, 8).numpy(), abs=1e-6)


def test_score_map_is_the_rules_score_of_the_visited_cells():
    space = goal_space(THREE_ROOM)
    # tile 3 visited 3 times (actions 0, 0, 1), tile 20 once: counts n(3, 0) = 2, n(3, 1) = 1, n(20, 2) = 1
    replay = filled_replay([3, 3, 3, 20], [0, 0, 1, 2])
    learner = TableLearner(space.obs_dim)
    learner.table[0, 3], learner.table[0, 20] = 0.8, 0.3
    scores = score_map(learner, SUNAdaptive(), GoalGrid.of(THREE_ROOM), replay.storage, replay.pseudocount,
                       one_hot(0, space.obs_dim))
    # SUN: V/n, the best goal action per tile: tile 3 max(0.8/2, 0.8/1) = 0.8, tile 20: 0.3/1
    assert scores[0, 3] == pytest.approx(0.8) and scores[2, 4] == pytest.approx(0.3)
    assert np.isnan(scores).sum() == 72 - 2  # unvisited tiles are no candidates


def test_start_state_is_the_step_after_an_episode_end():
    space = goal_space(THREE_ROOM)
    storage = GoalReplayStorage(space, num_envs=2, capacity=20)
    for step, (tiles, ends) in enumerate((([1, 2], [False, True]), ([3, 4], [False, False]), ([5, 6], [False, False]))):
        obs = one_hot(tiles, space.obs_dim)
        storage.extend(TensorDict({keys.OBS: obs, keys.ACTION: torch.zeros(2, dtype=torch.long), keys.NEXT_OBS: obs,
                                   keys.TERMINATED: torch.tensor(ends), keys.EPISODE_END: torch.tensor(ends)}, [2]))
    # env 1 ended its episode at step 0 (tile 2): its next step (tile 4) starts one
    assert int(start_observation(storage).argmax()) == 4


def test_a_snapshot_survives_its_file(tmp_path):
    snapshot = HeatmapSnapshot(MOUNTAIN_CAR, 1200, 100, np.arange(6.0).reshape(2, 3), np.ones((2, 3)),
                               np.zeros((2, 3)), values=np.full((2, 3), 0.5), start=(0.1, -0.2), selector="SUNAdaptive")
    snapshot.save(tmp_path / "s.npz")
    back = HeatmapSnapshot.load(tmp_path / "s.npz")
    assert (back.env_id, back.frames, back.percent, back.start, back.selector) == (MOUNTAIN_CAR, 1200, 100, (0.1, -0.2),
                                                                                   "SUNAdaptive")
    assert (back.visits == snapshot.visits).all() and back.scores is None and (back.values == 0.5).all()


# ---- maze walls and the evaluation's success map ---------------------------------------------------------
def _inside(rects, points: np.ndarray) -> np.ndarray:
    """``[N]`` whether each (x, y) lies inside one of the rectangles (x0, y0, w, h)."""
    r = np.array(rects)
    x, y = points[:, :1], points[:, 1:2]
    return ((x > r[:, 0]) & (x < r[:, 0] + r[:, 2]) & (y > r[:, 1]) & (y < r[:, 1] + r[:, 3])).any(1)


@pytest.mark.parametrize("name", ["PointMazeS", "PointMazeH", "AntMazeS", "AntMazeH"])
def test_maze_grids_carry_their_walls_in_the_goal_plane(name):
    from sun_lightning.envs import ant_maze, point_maze

    grid = GoalGrid.of(f"sun_lightning/{name}-v0")
    if name in point_maze.MAZES:
        wall, offset = point_maze.maze_wall(name), point_maze.MAZES[name][1]
        # the dynamics' wall test at points spread over the plane: a point is drawn inside a wall exactly where no
        # free cell has its (x, y) (PointMaze-H: over all of dims 2 and 3)
        xy = np.stack(np.meshgrid(np.linspace(-10.8, 11.8, 75), np.linspace(-10.8, 11.8, 75)), -1).reshape(-1, 2)
        xy = xy[(np.abs(xy) < offset).all(1)]
        cells = np.trunc(xy).astype(int) + offset
        column_wall = wall.all(axis=tuple(range(2, wall.ndim))) if wall.ndim > 2 else wall
        blocked = column_wall[cells[:, 0], cells[:, 1]]
        assert (_inside(grid.walls, xy) == blocked).all()
        assert len(grid.walls) == int(column_wall.sum())
    else:
        wall = ant_maze.maze_wall(name)
        centres = ant_maze.cell_centres(name).reshape(-1, 2)
        assert (_inside(grid.walls, centres) == wall.reshape(-1)).all()
        assert all(w == h == ant_maze.CELL_SIZE for _, _, w, h in grid.walls)
    assert GoalGrid.of(MOUNTAIN_CAR).walls == () and GoalGrid.of("sun_lightning/ArmPushH-v0").walls == ()


def test_maze_heatmaps_draw_the_walls_under_the_counts_and_the_success_map():
    from matplotlib.collections import PatchCollection

    from sun_lightning.envs.eval_goals import eval_goals
    from sun_lightning.results.heatmaps import snapshot_figure
    from sun_lightning.results.snapshot import success_points

    env = "sun_lightning/PointMazeS-v0"
    grid, goals = GoalGrid.of(env), eval_goals(env)
    reached = torch.arange(len(goals)) % 3 == 0
    points, success = success_points(grid, goals.goal, reached)
    assert points.shape == (63, 2) and success.sum() == reached.sum()
    visits = grid.histogram(goals.goal)
    snapshot = HeatmapSnapshot(env, 100, 100, visits, visits, visits, eval_points=points, eval_success=success,
                               eval_frames=100)
    fig = snapshot_figure(grid, snapshot, "run")
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split("\n")[0] for ax in axes] == ["visits in D", "goals selected", "goals reached",
                                                              "eval success (mean 0.33,"]
    for ax in axes:
        walls = [c for c in ax.collections if isinstance(c, PatchCollection)]
        assert len(walls) == 1 and len(walls[0].get_paths()) == 466  # 23² cells, 63 free
        drawn = ax.images[0] if ax.images else next(c for c in ax.collections if c not in walls)
        assert walls[0].get_zorder() < drawn.get_zorder()
    # success of goals sharing a position is averaged: the (x, y) columns of PointMaze-H
    h = "sun_lightning/PointMazeH-v0"
    h_goals = eval_goals(h)
    points, success = success_points(GoalGrid.of(h), h_goals.goal, torch.ones(len(h_goals), dtype=torch.bool))
    assert len(points) == len({tuple(g) for g in h_goals.goal[:, :2].tolist()}) < len(h_goals) and (success == 1).all()


def test_report_shows_the_final_eval_success_where_runs_evaluated(tmp_path):
    runs = {"sun": [_record("sun", 0, [0.2, 0.6], [0.5, 0.7]), _record("sun", 1, [0.4, 0.8], [0.7, 0.9])],
            "random": [_record("random", 0, [0.1, 0.3], [0.4, 0.5], goals=0.0)]}
    for record, value in zip(runs["sun"] + runs["random"], (0.25, 0.75, 0.1)):
        record.final["eval/success"] = value
        record.histories["eval/success"] = ([1000, 2000], [0.0, value])
    summary = summarize(runs)
    assert summary["sun"]["eval success"] == Stat(0.5, 0.25, 0.75, 2, pytest.approx(np.std([0.25, 0.75], ddof=1)))
    assert summary["random"]["eval success"] == Stat(0.1, None, None, 1)
    write_report(tmp_path, THREE_ROOM, runs, {})
    table = _first_table((tmp_path / "report.md").read_text())
    assert table["SUN adaptive"][-1] == "0.500 [0.250, 0.750] (n = 2)" and table["Random"][-1] == "0.100 (n = 1)"
    assert "coverage and entropy and eval success against env frames" in (tmp_path / "report.md").read_text()
    # runs without evaluation: no column
    assert "eval success" not in summarize({"sun": [_record("sun", 0, [0.2], [0.5])]})["sun"]


def test_eval_success_is_drawn_on_its_whole_range_and_coverage_on_its_own():
    from sun_lightning.results.curves import band_figure, run_curves_figure

    flat = ([1000, 2000, 3000], [0.048, 0.048, 0.048])  # the start cell only, all run long
    rising = ([1000, 2000, 3000], [0.01, 0.02, 0.03])
    fig = band_figure({"SUN": {COV: [rising], "eval/success": [flat]}}, {COV: "coverage", "eval/success": "eval success"},
                      "t")
    coverage_ax, eval_ax = fig.axes
    assert eval_ax.get_ylim() == (-0.02, 1.02)
    assert coverage_ax.get_ylim()[1] < 0.05  # a fraction that is not a rate keeps matplotlib's own range
    single = run_curves_figure({"eval/success": flat, COV: rising}, "t")
    assert [ax.get_ylim() == (-0.02, 1.02) for ax in single.axes] == [False, True]


def test_report_gives_the_diagnosis_signals_by_hand(tmp_path):
    runs = {"sun": [_record("sun", 0, [0.2], [0.5]), _record("sun", 1, [0.4], [0.7])],
            "random": [_record("random", 0, [0.1], [0.4], goals=0.0)]}
    for record, distance, resel in zip(runs["sun"] + runs["random"], (4.0, 6.0, 9.0), (0.1, 0.3, 0.0)):
        record.final["eval/final_distance"] = distance
        record.final["explore/goals/reselection_rate"] = resel
    write_report(tmp_path, THREE_ROOM, runs, {})
    text = (tmp_path / "report.md").read_text()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| method | eval final distance"))
    assert lines[header] == "| method | eval final distance | reselection rate |"  # only what the runs logged
    sun, rnd = ([c.strip() for c in line.split("|")[1:-1]] for line in lines[header + 2:header + 4])
    assert sun == ["SUN adaptive", "5.000 [4.000, 6.000] (n = 2)", "0.200 [0.100, 0.300] (n = 2)"]
    assert rnd == ["Random", "9.000 (n = 1)", "n/a"]  # a rule without goals has no reselection rate
    # runs that logged none of them: no table
    write_report(tmp_path / "plain", THREE_ROOM, {"sun": [_record("sun", 0, [0.2], [0.5])]}, {})
    assert "What the runs did" not in (tmp_path / "plain/report.md").read_text()


def test_report_names_where_each_method_ran(tmp_path):
    runs = {"sun": [_record("sun", 0, [0.2], [0.5]), _record("sun", 1, [0.4], [0.7])],
            "discover": [_record("discover", 0, [0.2], [0.5])],
            "random": [_record("random", 0, [0.1], [0.4], goals=0.0)]}
    for record, place in zip(runs["sun"] + runs["discover"] + runs["random"],
                             ("cpu (AMD EPYC, 2 cores)", "cpu (AMD EPYC, 2 cores)", "cuda (NVIDIA H100)", "")):
        record.hardware = place
    write_report(tmp_path, THREE_ROOM, runs, {})
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert ("Hardware: SUN adaptive: cpu (AMD EPYC, 2 cores); DISCOVER: cuda (NVIDIA H100); "
            "Random: not recorded.") in lines
    # runs that do not say: no line
    write_report(tmp_path / "plain", THREE_ROOM, {"sun": [_record("sun", 0, [0.2], [0.5])]}, {})
    assert "Hardware" not in (tmp_path / "plain/report.md").read_text()


def test_small_means_keep_three_significant_figures():
    assert Stat(0.00217, 0.00196, 0.00238, 3).format() == "0.00217 [0.00196, 0.00238] (n = 3)"
    assert Stat(0.0476, None, None, 1).format() == "0.0476 (n = 1)"
    assert Stat(0.5, 0.25, 0.75, 2).format() == "0.500 [0.250, 0.750] (n = 2)"
    assert Stat(0.0, 0.0, 0.0, 2).format() == "0.000 [0.000, 0.000] (n = 2)"
    assert Stat(-0.03, None, None, 1).format() == "-0.0300 (n = 1)"
