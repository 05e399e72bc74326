"""The goal-reaching evaluation: its goal sets, what it measures, and that training does not see it."""

from __future__ import annotations

import collections
import csv
from pathlib import Path

import numpy as np
import pytest
import torch

import sun_lightning.envs  # noqa: F401
from sun_lightning.envs import ant_maze, point_maze
from sun_lightning.envs.eval_goals import eval_goals
from sun_lightning.envconfig.layout import LAYOUTS
from sun_lightning.envs.registry import env_ids, goal_space
from sun_lightning.metrics.evaluation import GoalEvaluator

ROOT = Path(__file__).resolve().parents[2]
POINT_S = "sun_lightning/PointMazeS-v0"


# ---- goal sets ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(point_maze.MAZES))
def test_point_maze_goals_are_the_centres_of_every_free_cell(name):
    goals = eval_goals(f"sun_lightning/{name}-v0").goal
    wall = point_maze.maze_wall(name)
    offset = point_maze.MAZES[name][1]
    cells = goals.to(torch.int64).numpy() + offset  # the dynamics' cell of each goal: int(p) + offset
    assert not wall[tuple(cells.T)].any()
    assert len({tuple(c) for c in cells}) == len(goals) == int((~wall).sum())
    # a centre: 0.5 from the cell's faces (the start cell spans (-1, 1), centre 0)
    frac = (goals.abs() - goals.abs().floor()).numpy()
    assert np.all((frac == 0.5) | (goals.numpy() == 0.0))


@pytest.mark.parametrize("name", list(ant_maze.MAPS))
def test_ant_maze_goals_are_the_centres_of_every_free_cell(name):
    goals = eval_goals(f"sun_lightning/{name}-v0").goal.numpy()
    wall = ant_maze.maze_wall(name)
    n = wall.shape[0]
    cells = (goals + ant_maze.CELL_SIZE * (n - 1) / 2) / ant_maze.CELL_SIZE
    assert np.allclose(cells, cells.round())  # cell centres
    assert not wall[tuple(cells.round().astype(int).T)].any()
    assert len(goals) == int((~wall).sum())


def test_gridworld_goals_are_every_free_tile_and_goal_action():
    goals = eval_goals("sun_lightning/FourRoomStuck-v0")
    layout = LAYOUTS["FourRoomStuck"]
    tiles = goals.goal.argmax(-1)
    assert not layout.wall[tiles.numpy()].any()
    pairs = set(zip(tiles.tolist(), goals.goal_action.tolist()))
    assert pairs == {(t, a) for t in layout.coverable for a in range(layout.num_actions)} and len(pairs) == len(goals)


def test_every_environment_has_goals_of_its_goal_space():
    for env_id in [e for e in env_ids() if e.startswith("sun_lightning/")]:  # (not gymnasium ids given a data.goal)
        goals, space = eval_goals(env_id), goal_space(env_id)
        assert goals.goal.shape == (len(goals), space.goal_dim) and len(goals) > 0, env_id
        assert (goals.goal_action is not None) == space.discrete, env_id
        if space.discrete:
            assert goals.goal_action.max() < space.num_actions
    arm = eval_goals("sun_lightning/ArmPushH-v0").goal
    assert ((arm.norm(dim=1) >= 0.3) & (arm.norm(dim=1) <= 0.85)).all() and (arm[:, 1] > 0).all()


# ---- what it measures -----------------------------------------------------------------------------------------------
def _corridor_policy(name: str):
    """A scripted PointMaze policy: along the shortest corridor path, from cell centre to cell centre."""
    wall, offset = point_maze.maze_wall(name), point_maze.MAZES[name][1]
    free = [tuple(c) for c in np.argwhere(~wall)]
    hops = {}
    for goal in free:  # breadth-first from each goal: the next cell towards it from every free cell
        hop, queue = {goal: goal}, collections.deque([goal])
        while queue:
            cell = queue.popleft()
            for axis in range(wall.ndim):
                for step in (1, -1):
                    nxt = tuple(c + step * (i == axis) for i, c in enumerate(cell))
                    if not wall[nxt] and nxt not in hop:
                        hop[nxt] = cell
                        queue.append(nxt)
        hops[goal] = hop

    def cell_of(p):
        return tuple((np.trunc(p).astype(int) + offset).tolist())

    def act(obs, goal, goal_action):
        out = []
        for p, g in zip(obs.numpy().astype(np.float64), goal.numpy().astype(np.float64)):
            here, there = cell_of(p), cell_of(g)
            target = g
            if here != there:
                centre = point_maze.cell_centre(np.array(here), offset)
                hop = np.array(hops[there][here])
                across = hop == np.array(here)  # the axes the move to the next cell does not change
                # onto the line between the two centres first, so no step lands in a wall
                on_line = np.abs((p - centre)[across]).max() < 1e-3
                target = point_maze.cell_centre(hop, offset) if on_line else centre
            out.append(np.clip((target - p) / point_maze.STEP_SCALE, -1, 1))
        return torch.tensor(np.array(out), dtype=torch.float32)

    return act


def test_corridor_following_reaches_every_point_maze_goal_and_random_actions_do_not():
    evaluator = GoalEvaluator(POINT_S, eval_goals(POINT_S), seed=3)
    scripted = evaluator.run(_corridor_policy("PointMazeS"))
    # every free cell is reachable from the start within the horizon (the farthest is 19 cells away)
    assert scripted.reached.all() and scripted.metrics()["eval/success"] == 1.0
    assert (scripted.final_distance < 0.5).all()
    assert 0 < scripted.metrics()["eval/steps_to_goal"] < 100 and scripted.steps.max() < 100
    generator = torch.Generator().manual_seed(0)
    random = evaluator.run(lambda obs, goal, _: torch.rand(len(obs), 2, generator=generator) * 2 - 1)
    metrics = random.metrics()
    assert 0 < metrics["eval/success"] < 0.3
    # the goals it reaches are near the start; it ends far from the others
    assert random.goals.goal[random.reached].norm(dim=1).max() < 5
    assert metrics["eval/final_distance"] > 3


# ---- training does not see it ------------------------------------------------------------------------------------------
_SMALL_TD3 = ["--model.init_args.hidden", "32", "--model.init_args.features", "16", "--model.init_args.maxout_width", "64",
              "--model.init_args.head_width", "32", "--model.init_args.batch_size", "32", "--model.init_args.horizon", "20"]


#: Evaluation quiet, metrics to a CSV file in the run's folder, no checkpoints.
EVAL = ("--eval.verbose", "false", "--trainer.enable_checkpointing", "false", "--results.fractions", "[1.0]",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.init_args.save_dir", ".",
        "--seed_everything", "0")


def _metrics(cli) -> list[dict[str, str]]:
    with open(Path(cli.trainer.logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_evaluation_leaves_training_bit_identical(fit):
    extra = ["--data.total_frames", "260", "--data.warmup_frames", "100", "--data.num_envs", "4",
             "--data.updates_per_frame", "0.25", "--metrics.log_every_frames", "80", "--eval.max_goals", "16",
             *_SMALL_TD3]
    runs = [fit("point_maze_s.yaml", *EVAL, "--eval.every_frames", str(every), *extra) for every in (0, 60)]
    plain, evaluated = (cli.datamodule.exploration for cli in runs)
    assert plain.frames == evaluated.frames == 260
    for name in ("observation", "action"):
        assert torch.equal(plain.storage.columns.get(name), evaluated.storage.columns.get(name)), name
    for (name, a), (_, b) in zip(runs[0].model.state_dict().items(), runs[1].model.state_dict().items()):
        assert torch.equal(a, b), name
    assert runs[0].model.updates == runs[1].model.updates == 40
    rows = [_metrics(cli) for cli in runs]
    training = [{(r["step"], k): v for r in rs for k, v in r.items()
                 if v and k != "step" and not k.startswith(("eval/", "perf/"))} for rs in rows]
    assert training[0] == training[1] and any(k[1] == "train/loss/td" for k in training[0])
    evals = [(int(r["step"]), float(r["eval/success"])) for r in rows[1] if r.get("eval/success")]
    assert [s for s, _ in evals] == [60, 120, 180, 240, 260] and all(0 <= v <= 1 for _, v in evals)
    assert not any(r.get("eval/success") for r in rows[0])


def test_a_dqn_gridworld_run_logs_greedy_eval_success(fit):
    cli = fit("three_room.yaml", *EVAL, "--eval.every_frames", "300", "--data.total_frames", "600",
              "--data.warmup_frames", "300", "--data.updates_per_frame", "0.05", "--eval.max_goals", "null")
    rows = [r for r in _metrics(cli) if r.get("eval/success")]
    assert [int(r["step"]) for r in rows] == [300, 600]
    for row in rows:
        success = float(row["eval/success"])
        # 288 goals: 72 free tiles × 4 goal actions; success is a count of them
        assert 0 <= success <= 1 and abs(success * 288 - round(success * 288)) < 1e-9
        assert float(row["eval/final_distance"]) >= 0
    evaluation = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "GoalEvaluation")
    assert len(evaluation.latest.reached) == 288
