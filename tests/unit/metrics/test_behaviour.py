"""What the episodes did (sun_lightning.metrics.behaviour): reach and action saturation against plain loops, over D's
ring, and logged by a run."""

from __future__ import annotations

import math
from pathlib import Path

import mlflow
import pytest
import torch
from tensordict import TensorDict

from sun_lightning import keys
from sun_lightning.envs.registry import goal_space
from sun_lightning.metrics.behaviour import (action_saturation, behaviour_metrics, checkpoint_behaviour,
                                            chronological_index, episode_reach, unmoved_fraction)
from sun_lightning.replay.storage import GoalReplayStorage

POINT_MAZE = "sun_lightning/PointMazeS-v0"
ROOT = Path(__file__).resolve().parents[3]


def reach_by_loop(goals, ends, since):
    """Per stream, walk the steps; an episode's reach is kept when it ends at or after ``since``."""
    steps, envs = ends.shape
    found = []
    for t in range(steps):
        for e in range(envs):
            if ends[t, e] and t >= since:
                start = t
                while start > 0 and not ends[start - 1, e]:
                    start -= 1
                found.append((t, e, max(float((goals[s, e] - goals[start, e]).norm()) for s in range(start, t + 1))))
    return [r for _, _, r in sorted(found)]


@pytest.mark.parametrize("since", [0, 7, 30])
def test_episode_reach_is_the_farthest_distance_from_each_episodes_start(since):
    g = torch.Generator().manual_seed(since)
    goals = torch.randn(40, 3, 2, generator=g).cumsum(0)
    ends = torch.rand(40, 3, generator=g) < 0.15
    got = episode_reach(goals, ends, since)
    assert got.tolist() == pytest.approx(reach_by_loop(goals, ends, since), abs=1e-5)
    assert len(got) == int(ends[since:].sum())


def test_a_point_walking_away_reaches_its_last_distance_and_one_standing_still_zero():
    steps = torch.arange(6, dtype=torch.float32)
    goals = torch.stack([torch.stack([steps, 0 * steps], -1), torch.zeros(6, 2)], 1)  # [6, 2 streams, 2]
    ends = torch.zeros(6, 2, dtype=torch.bool)
    ends[2, 0] = ends[5, 0] = ends[5, 1] = True
    assert episode_reach(goals, ends).tolist() == [2.0, 2.0, 0.0]  # 0→2, then 3→5 (from 3), and the still one


def test_unmoved_counts_the_steps_whose_goal_did_not_change():
    goals = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 3.0], [5.0, 5.0]])
    after = torch.tensor([[0.0, 0.0], [1.0, 2.5], [3.0, 3.0 + 1e-7], [5.0, 4.0]])
    assert unmoved_fraction(goals, after) == 0.5
    assert math.isnan(unmoved_fraction(goals[:0], after[:0]))


def test_saturation_counts_components_at_a_bound():
    assert action_saturation(torch.tensor([[1.0, -1.0, 0.2, 0.995], [0.0, -0.5, 0.98, -0.999]])) == 0.5
    uniform = torch.rand(100_000, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    assert action_saturation(uniform) == pytest.approx(0.01, abs=0.002)
    assert math.isnan(action_saturation(torch.zeros(0, 2)))


def test_behaviour_metrics_read_the_window_of_a_wrapped_ring_like_a_list_of_the_written_steps():
    space = goal_space(POINT_MAZE)
    envs, capacity, written = 2, 20, 17  # the ring holds the last 10 of 17 steps
    storage = GoalReplayStorage(space, envs, capacity)
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(written, envs, space.obs_dim, generator=g)
    actions = torch.rand(written, envs, space.action_dim, generator=g) * 2 - 1
    actions[12:, 0] = 1.0  # stream 0 pinned at the bound in the window
    ends = torch.rand(written, envs, generator=g) < 0.3
    next_obs = obs.clone()
    next_obs[:, 0] += 0.5  # stream 0 moves every step, stream 1 walks into a wall every step
    for t in range(written):
        storage.extend(TensorDict({keys.OBS: obs[t], keys.ACTION: actions[t], keys.NEXT_OBS: next_obs[t],
                                   keys.TERMINATED: torch.zeros(envs, dtype=torch.bool), keys.EPISODE_END: ends[t]},
                                  batch_size=[envs]))
    index = chronological_index(storage)
    assert torch.equal(storage.get(index)[keys.OBS], obs[7:])
    metrics = behaviour_metrics(storage, since_step=12)
    held_goals = space.project(obs[7:])
    assert metrics["explore/episodes/reach"] == pytest.approx(
        sum(reach_by_loop(held_goals, ends[7:], 5)) / int(ends[12:].sum()), abs=1e-5)
    assert metrics["explore/actions/saturation"] == pytest.approx(action_saturation(actions[12:]))
    assert metrics["explore/actions/unmoved"] == 0.5
    # a window older than the ring: from the oldest step held
    assert behaviour_metrics(storage, 0)["explore/actions/saturation"] == pytest.approx(action_saturation(actions[7:]))


def test_a_point_maze_run_logs_reach_and_saturation(tmp_path, monkeypatch):
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(ROOT / "conf/point_maze_s.yaml"), "--data.total_frames", "816",
          "--data.warmup_frames", "800", "--data.num_envs", "4", "--metrics.log_every_frames", "800",
          "--eval.every_frames", "0", "--trainer.enable_progress_bar", "false", "--metrics.verbose", "false"])
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    logged = {}
    for name in ("explore/actions/saturation", "explore/episodes/reach", "explore/actions/unmoved"):
        for metric in client.get_metric_history(run.info.run_id, name):
            logged.setdefault(metric.step, {})[name] = metric.value
    warmup, last = logged[800], logged[816]
    # 4 envs × 200 steps of uniform random actions: 8 episodes of 100 steps, a random walk of a few units
    assert warmup["explore/actions/saturation"] == pytest.approx(0.01, abs=0.01)
    assert 0.3 < warmup["explore/episodes/reach"] < 10
    assert 0.0 <= warmup["explore/actions/unmoved"] < 0.5  # random moves into walls are refused, the rest move
    assert 0 <= last["explore/actions/saturation"] <= 1 and "explore/episodes/reach" not in last  # none ended
    # the checkpoint's D gives the same episodes (all 8 ended by step 200 of 204)
    from_checkpoint = checkpoint_behaviour(str(tmp_path / "checkpoints/PointMazeS-sun-seed0/last.ckpt"))
    assert from_checkpoint["explore/episodes/reach"] == pytest.approx(warmup["explore/episodes/reach"])
