"""The straight-line floor of the goal-reaching evaluation (sun_lightning/metrics/straight_line.py): on PointMaze-S
it reaches exactly the evaluation goals whose segment from the start crosses no wall cell."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

import sun_lightning.envs  # noqa: F401
from sun_lightning.envs.eval_goals import eval_goals
from sun_lightning.envs.point_maze import maze_wall
from sun_lightning.envs.registry import goal_space
from sun_lightning.metrics.evaluation import GoalEvaluator
from sun_lightning.metrics.straight_line import straight_line, straight_line_context, straight_line_metrics

ENV = "sun_lightning/PointMazeS-v0"


def in_sight(start: np.ndarray, goal: np.ndarray, wall: np.ndarray, offset: int = 11) -> bool:
    """Every point of the segment start → goal (10 000 samples) lies in a free cell (cell = int(p) + offset)."""
    points = start + np.linspace(0.0, 1.0, 10_000)[:, None] * (goal - start)
    cells = np.trunc(points).astype(int) + offset
    return not wall[cells[:, 0], cells[:, 1]].any()


def test_it_reaches_the_goals_in_line_of_sight_and_no_other():
    goals = eval_goals(ENV)
    evaluator = GoalEvaluator(ENV, goals, seed=0)
    starts, _ = gymnasium.make_vec(ENV, num_envs=len(goals), vectorization_mode="vector_entry_point").reset(seed=0)
    result = evaluator.run(straight_line(evaluator.space))
    wall = maze_wall("PointMazeS")
    expected = [in_sight(s, g, wall) for s, g in zip(np.asarray(starts), goals.goal.numpy())]
    assert result.reached.tolist() == expected
    assert 10 < sum(expected) < len(goals) - 10  # the maze has turns: some goals in sight, many not
    # in sight, it goes along the line at full speed (0.5 along the longest axis) until within 0.5 of the goal:
    # after t steps the distance left is ‖d‖₂ (1 − 0.5 t / ‖d‖∞)
    d = (goals.goal - torch.as_tensor(np.asarray(starts))).double()
    within = torch.ceil((1 - 0.5 / d.norm(dim=1)).clamp(min=0) * d.abs().amax(1) / 0.5).long()
    assert result.steps[result.reached].tolist() == within[result.reached].tolist()
    assert straight_line_metrics(ENV, max_goals=None)["eval/success"] == sum(expected) / len(goals)


def test_it_is_refused_where_actions_do_not_move_the_goal():
    with pytest.raises(ValueError, match="straight-line policy needs continuous actions"):
        straight_line(goal_space("sun_lightning/ThreeRoom-v0"))


def test_a_point_mazes_report_states_the_floor_and_no_other_does():
    (line,) = straight_line_context(ENV, max_goals=None)
    assert f"reaches {straight_line_metrics(ENV, max_goals=None)['eval/success']:.3f} of the same 63 evaluation goals" in line
    assert straight_line_context("sun_lightning/ThreeRoom-v0") == []
    assert straight_line_context("sun_lightning/AntMazeS-v0") == []
