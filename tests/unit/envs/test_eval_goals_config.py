"""Evaluation goals from the config (``eval.goals``): a grid over the goal bounds, a list, the registered set,
and a goal-reaching evaluation on an environment from outside the package."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from sun_lightning.run.cli import main
from sun_lightning.envs.eval_goals import bounds_grid, configured_eval_goals, eval_goals
from sun_lightning.envs.registry import GoalSpace, goal_space
from sun_lightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CONTINUOUS = GoalSpace(obs_dim=3, num_actions=0, action_dim=2, goal_dims=(0, 1), low=(-1.0, 0.0), high=(1.0, 2.0),
                       reach="distance", eta=0.1)
DISCRETE = GoalSpace(obs_dim=3, num_actions=3, goal_dims=(0, 1), low=(-1.0, 0.0), high=(1.0, 2.0), reach="radius",
                     rho=0.1)


def test_grid_over_the_goal_bounds_by_hand():
    grid = bounds_grid(CONTINUOUS, max_goals=10)  # ⌊10^(1/2)⌋ = 3 values per dimension
    expected = [[x, y] for x in (-1.0, 0.0, 1.0) for y in (0.0, 1.0, 2.0)]
    assert grid.goal.tolist() == expected and grid.goal_action is None
    grid = bounds_grid(DISCRETE, max_goals=4)  # 2 values per dimension, × 3 goal actions, goal-major
    assert grid.goal.tolist() == [g for g in ([-1.0, 0.0], [-1.0, 2.0], [1.0, 0.0], [1.0, 2.0]) for _ in range(3)]
    assert grid.goal_action.tolist() == [0, 1, 2] * 4
    assert len(bounds_grid(CONTINUOUS, max_goals=256)) == 256  # 16 × 16
    assert len(bounds_grid(CONTINUOUS, max_goals=1)) == 4  # at least 2 per dimension


def test_an_unbounded_goal_dimension_needs_a_list():
    space = GoalSpace(obs_dim=2, num_actions=0, action_dim=2, goal_dims=(0, 1), low=(-1.0, -math.inf),
                      high=(1.0, math.inf), reach="distance", eta=0.1)
    with pytest.raises(ConfigError, match="goal dimension 1 has no finite bounds"):
        configured_eval_goals("x", space, "auto", 256)
    listed = configured_eval_goals("x", space, [[0.5, 3.0], [0.0, -7.0]], 256)
    assert listed.goal.tolist() == [[0.5, 3.0], [0.0, -7.0]] and listed.goal_action is None


def test_listed_goals_are_checked():
    with pytest.raises(ConfigError, match=r"eval.goals\[1\] has 3 values; x's goals take 2 goal values"):
        configured_eval_goals("x", CONTINUOUS, [[0.0, 1.0], [0.0, 1.0, 2.0]], None)
    with pytest.raises(ConfigError, match="2 goal values and a goal action"):
        configured_eval_goals("x", DISCRETE, [[0.0, 1.0]], None)
    with pytest.raises(ConfigError, match=r"a goal action must be an integer in \[0, 3\)"):
        configured_eval_goals("x", DISCRETE, [[0.0, 1.0, 3.0]], None)
    with pytest.raises(ConfigError, match="auto, grid or a list"):
        configured_eval_goals("x", DISCRETE, "cells", None)
    goals = configured_eval_goals("x", DISCRETE, [[0.0, 1.0, 2.0], [0.5, 0.5, 0.0]], None)
    assert goals.goal.tolist() == [[0.0, 1.0], [0.5, 0.5]] and goals.goal_action.tolist() == [2, 0]


def test_auto_is_the_registered_set_where_there_is_one():
    env_id = "sun_lightning/PointMazeS-v0"
    auto = configured_eval_goals(env_id, goal_space(env_id), "auto", 256)
    assert auto is eval_goals(env_id) and len(auto) == 63
    grid = configured_eval_goals(env_id, goal_space(env_id), "grid", 256)
    assert len(grid) == 256 and torch.equal(grid.goal[0], torch.tensor([-11.0, -11.0]))


@pytest.mark.slow
def test_a_custom_env_run_evaluates_over_its_goal_bounds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / "conf/custom/acrobot.yaml"), "--data.total_frames", "480",
                "--data.warmup_frames", "400", "--data.num_envs", "4", "--data.updates_per_frame", "0.1",
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.enable_progress_bar", "false", "--eval.every_frames", "400", "--eval.max_goals", "16",
                "--results.fractions", "[1.0]"])
    evaluation = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "GoalEvaluation")
    # 2 values per goal dimension (⌊16^(1/4)⌋) × 3 goal actions = 48 goals, 16 of them evaluated
    assert evaluation.latest is not None and len(evaluation.latest.reached) == 16
    assert evaluation.latest_frames == 480
    latest = evaluation.latest
    assert (latest.steps[~latest.reached] == 500).all()  # Acrobot-v1's horizon, read from its spec
