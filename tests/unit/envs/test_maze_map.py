"""A Gymnasium-Robotics maze as a researcher's own env: its map read once, the goal bounds, evaluation goals and
heatmap walls taken from it, against a hand computation from the maze map and its scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sun_lightning.envs.custom import CustomEnv, GoalConfig
from sun_lightning.envs.eval_goals import configured_eval_goals
from sun_lightning.envs.maze_map import MazeMap, maze_map_of, recorded_maze
from sun_lightning.errors import ConfigError
from sun_lightning.results.walls import wall_rectangles

gymnasium_robotics = pytest.importorskip("gymnasium_robotics")
import gymnasium  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
U_MAZE = [[1, 1, 1, 1, 1], [1, 0, 0, 0, 1], [1, 1, 1, 0, 1], [1, 0, 0, 0, 1], [1, 1, 1, 1, 1]]


def test_map_geometry_by_hand():
    # 5 x 5 cells of side 4 centred on the origin: x = (j + 0.5)·4 − 10, y = 10 − (i + 0.5)·4
    maze = MazeMap(np.array(U_MAZE) == 1, 4.0, 10.0, 10.0)
    assert maze.free_centres().tolist() == [[-4, 4], [0, 4], [4, 4], [4, 0], [-4, -4], [0, -4], [4, -4]]
    assert maze.free_bounds() == ((-6.0, -6.0), (6.0, 6.0))
    rects = maze.wall_rectangles()
    assert len(rects) == 18 and rects[0] == (-10.0, 6.0, 4.0, 4.0)  # cell (0, 0): x ∈ [−10, −6], y ∈ [6, 10]
    assert (-6.0, -2.0, 4.0, 4.0) in rects  # cell (2, 1), the U's middle wall


@pytest.mark.parametrize("env_id, scaling", [("PointMaze_UMaze-v3", 1.0), ("AntMaze_UMaze-v5", 4.0)])
def test_the_map_read_from_the_env_agrees_with_the_env(env_id, scaling):
    env = gymnasium.make(env_id)
    try:
        maze = maze_map_of(env)
        assert maze.scaling == scaling and maze.wall.tolist() == (np.array(U_MAZE) == 1).tolist()
        expected = [env.unwrapped.maze.cell_rowcol_to_xy(cell) for cell in np.argwhere(np.array(U_MAZE) == 0)]
        np.testing.assert_allclose(maze.free_centres(), np.array(expected))
    finally:
        env.close()
    assert maze_map_of(gymnasium.make("Pendulum-v1")) is None


def test_auto_bounds_eval_goals_and_walls_of_a_custom_maze():
    env = CustomEnv("PointMaze_UMaze-v3", GoalConfig(low="auto", high="auto", reach=0.45), "gymnasium_robotics")
    assert env.space.low == (-1.5, -1.5) and env.space.high == (1.5, 1.5)
    assert env.space.goal_dims == (4, 5)  # achieved_goal, after the 4 entries of observation
    assert recorded_maze("PointMaze_UMaze-v3") is env.maze
    goals = configured_eval_goals("PointMaze_UMaze-v3", env.space, "auto", 256)
    assert goals.goal.tolist() == [[-1, 1], [0, 1], [1, 1], [1, 0], [-1, -1], [0, -1], [1, -1]]
    assert len(wall_rectangles("PointMaze_UMaze-v3")) == 18


def test_auto_bounds_need_a_maze():
    with pytest.raises(ConfigError, match="auto reads a maze's map .* Pendulum-v1 has none"):
        CustomEnv("Pendulum-v1", GoalConfig(low="auto", high="auto"))
    with pytest.raises(ConfigError, match="a list of numbers or auto, got 'maze'"):
        CustomEnv("PointMaze_UMaze-v3", GoalConfig(low="maze", high="auto"), "gymnasium_robotics")


@pytest.mark.slow
@pytest.mark.parametrize("config", ["point_maze_umaze", "antmaze_umaze"])
def test_the_example_configs_fit_and_evaluate(config, tmp_path, monkeypatch):
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / f"conf/custom/{config}.yaml"), "--data.total_frames", "1100",
                "--data.warmup_frames", "1000", "--data.num_envs", "4", "--eval.every_frames", "1000",
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.enable_progress_bar", "false", "--results.fractions", "[1.0]",
                "--model.init_args.hidden", "32", "--model.init_args.maxout_width", "64",
                "--model.init_args.head_width", "32"])
    evaluation = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "GoalEvaluation")
    assert cli.model.updates > 0 and len(evaluation.latest.reached) == 7  # the U's free cells


def test_a_report_process_knows_a_configs_own_env():
    """The comparison report draws a user's env's heatmaps in a process that ran none of its runs."""
    from sun_lightning.study.report import record_config_env
    from sun_lightning.envs.maze_map import record_maze
    from sun_lightning.envs.registry import goal_space
    from sun_lightning.results.goal_grid import GoalGrid

    record_maze("AntMaze_UMaze-v5", None)
    record_config_env(ROOT / "conf/custom/antmaze_umaze.yaml")
    assert goal_space("AntMaze_UMaze-v5").low == (-6.0, -6.0)
    assert len(GoalGrid.of("AntMaze_UMaze-v5").walls) == 18
    record_config_env(ROOT / "conf/point_maze_s.yaml")  # a registered id: nothing to do
