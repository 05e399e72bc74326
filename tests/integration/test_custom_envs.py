"""A researcher's own environment: any id gymnasium knows, its goal space in ``data.goal``; the two worked
examples of docs/custom-envs.md fit and log coverage over the configured bounds, the goal projection is the hand
computation, each bad input is one line with exit 2, and a goal-dict env trains with its ``achieved_goal``."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
import mlflow
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from sun_lightning import keys
from sun_lightning.__main__ import entry
from sun_lightning.run.cli import main
from sun_lightning.envs.custom import CustomEnv, GoalConfig
from sun_lightning.envs.registry import goal_space
from sun_lightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MCC = ROOT / "conf" / "custom" / "mountain_car_continuous.yaml"
ACROBOT = ROOT / "conf" / "custom" / "acrobot.yaml"
QUIET = ["--metrics.verbose", "false", "--trainer.enable_progress_bar", "false", "--results.fractions", "[1.0]"]
#: The TD3 variant at a size a few hundred CPU frames can afford (the examples keep the paper's sizes).
SMALL_TD3 = ["--model.init_args.hidden", "32", "--model.init_args.maxout_width", "64",
             "--model.init_args.head_width", "32", "--model.init_args.batch_size", "32", "--model.init_args.horizon", "8"]


class DictPoint(gymnasium.Env):
    """A point in [−1, 1]² pushed by its action (a Box of [−2, 2]², rescaled to [−1, 1] by the package): a goal dict
    whose ``observation`` is the velocity and whose ``achieved_goal`` is the position, with a ``desired_goal`` task
    and a reward that exploration ignores."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        box = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float64)
        velocity = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.observation_space = gymnasium.spaces.Dict(
            {"observation": velocity, "achieved_goal": box, "desired_goal": box})
        self.action_space = gymnasium.spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.pos, self.vel, self.target = np.zeros(2), np.zeros(2), np.zeros(2)

    def _obs(self) -> dict:
        return {"observation": self.vel.copy(), "achieved_goal": self.pos.copy(), "desired_goal": self.target.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.1, 0.1, 2)
        self.vel, self.target = np.zeros(2), self.np_random.uniform(-1, 1, 2)
        return self._obs(), {}

    def step(self, action):
        self.vel = np.clip(np.asarray(action, dtype=np.float64) / 20, -1, 1)
        self.pos = np.clip(self.pos + self.vel, -1, 1)
        return self._obs(), -float(np.linalg.norm(self.pos - self.target)), False, False, {}


gymnasium.register("TestDictPoint-v0", entry_point=DictPoint, max_episode_steps=30)


def test_the_goal_projection_is_the_hand_computation_on_recorded_steps():
    # MountainCarContinuous: g_s = (x, ẋ), the simulator's own state.
    custom = CustomEnv("MountainCarContinuous-v0", GoalConfig(dims=[0, 1], low=[-1.2, -0.07], high=[0.6, 0.07]))
    space = goal_space("MountainCarContinuous-v0")
    assert (space.obs_dim, space.num_actions, space.action_dim, space.reach) == (2, 0, 1, "radius")
    assert space.low == (-1.2, -0.07) and space.high == (0.6, 0.07) and not custom.rescale
    venv = custom.make_vec(3, AutoresetMode.DISABLED)
    venv.reset(seed=5)
    for _ in range(4):
        obs, *_ = venv.step(venv.action_space.sample())
        goal = space.project(torch.as_tensor(obs)).numpy()
        want = np.array([env.unwrapped.state for env in venv.envs])
        np.testing.assert_allclose(goal, want, rtol=1e-6, atol=1e-7)
    venv.close()
    # Acrobot: g_s = (cos θ1, sin θ1, cos θ2, sin θ2) from its joint angles, and the action (discrete).
    custom = CustomEnv("Acrobot-v1", GoalConfig(dims=[0, 1, 2, 3], low=[-1] * 4, high=[1] * 4, reach=0.3))
    space = goal_space("Acrobot-v1")
    assert (space.num_actions, space.reach, space.eta, space.discrete) == (3, "distance", 0.3, True)
    venv = custom.make_vec(2)
    venv.reset(seed=1)
    obs, *_ = venv.step(np.array([0, 2]))
    th = np.array([env.unwrapped.state[:2] for env in venv.envs])
    want = np.stack([np.cos(th[:, 0]), np.sin(th[:, 0]), np.cos(th[:, 1]), np.sin(th[:, 1])], 1)
    np.testing.assert_allclose(space.project(torch.as_tensor(obs)).numpy(), want, rtol=1e-5, atol=1e-6)
    venv.close()


def test_a_goal_dict_is_flattened_with_the_goal_from_achieved_goal():
    custom = CustomEnv("TestDictPoint-v0", GoalConfig(low=[-1, -1], high=[1, 1], reach=0.1))
    space = goal_space("TestDictPoint-v0")
    # observation (velocity) first, then achieved_goal (position); desired_goal (the task) left out
    assert space.obs_dim == 4 and space.goal_dims == (2, 3) and space.action_dim == 2 and custom.rescale
    venv = custom.make_vec(2)
    assert venv.single_observation_space.shape == (4,) and venv.single_observation_space.dtype == np.float32
    assert venv.single_action_space == gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    venv.reset(seed=0)
    before = np.array([env.unwrapped.pos for env in venv.envs])
    obs, *_ = venv.step(np.array([[1.0, -1.0], [0.5, 0.0]], dtype=np.float32))
    pos = np.array([env.unwrapped.pos for env in venv.envs])
    # action 1.0 is the env's 2.0 (rescaled), a velocity of 2 / 20
    np.testing.assert_allclose(pos - before, [[0.1, -0.1], [0.05, 0.0]], atol=1e-6)
    np.testing.assert_allclose(space.project(torch.as_tensor(obs)).numpy(), pos, atol=1e-6)
    np.testing.assert_allclose(obs[:, :2], [[0.1, -0.1], [0.05, 0.0]], atol=1e-6)
    venv.close()


def test_the_heatmap_axes_are_named_from_the_goal():
    from sun_lightning.results.goal_grid import GoalGrid

    CustomEnv("TestDictPoint-v0", GoalConfig(low=[-1, -1], high=[1, 1], reach=0.1))  # goal from achieved_goal
    assert goal_space("TestDictPoint-v0").goal_names == ("achieved_goal[0]", "achieved_goal[1]")
    assert GoalGrid.of("TestDictPoint-v0").axis_labels == ("achieved_goal[0]", "achieved_goal[1]")
    CustomEnv("TestDictPoint-v0", GoalConfig(dims=[3, 0], low=[-1, -1], high=[1, 1]))  # indices of the flat dict
    assert GoalGrid.of("TestDictPoint-v0").axis_labels == ("achieved_goal[1]", "observation[0]")
    CustomEnv("MountainCarContinuous-v0", GoalConfig(dims=[1, 0], low=[-0.07, -1.2], high=[0.07, 0.6]))
    assert GoalGrid.of("MountainCarContinuous-v0").axis_labels == ("obs[1]", "obs[0]")
    CustomEnv("MountainCarContinuous-v0", GoalConfig(dims=[0, 1], low=[-1.2, -0.07], high=[0.6, 0.07],
                                                     names=["position", "velocity"]))
    assert GoalGrid.of("MountainCarContinuous-v0").axis_labels == ("position", "velocity")
    # the package's own envs keep their goal dims' indices
    assert GoalGrid.of("sun_lightning/PointMazeS-v0").axis_labels[0].startswith("goal dim 0 (obs[")


def test_a_mazes_axes_are_x_and_y_unless_named():
    pytest.importorskip("gymnasium_robotics", reason="the robotics extra (pip install -e '.[robotics]') is absent")
    from sun_lightning.results.goal_grid import GoalGrid

    CustomEnv("PointMaze_UMaze-v3", GoalConfig(low="auto", high="auto", reach=0.45), "gymnasium_robotics")
    assert GoalGrid.of("PointMaze_UMaze-v3").axis_labels == ("x", "y")
    assert goal_space("PointMaze_UMaze-v3").low == (-1.5, -1.5)
    CustomEnv("PointMaze_UMaze-v3", GoalConfig(low="auto", high="auto", names=["east", "north"]), "gymnasium_robotics")
    assert GoalGrid.of("PointMaze_UMaze-v3").axis_labels == ("east", "north")


def test_the_async_vector_env_steps_as_the_sync_one():
    configs = GoalConfig(dims=[0, 1, 2, 3], low=[-1] * 4, high=[1] * 4)
    sync, spawned = (CustomEnv("Acrobot-v1", configs, vector=mode).make_vec(2) for mode in ("sync", "async"))
    assert isinstance(spawned, gymnasium.vector.AsyncVectorEnv)
    actions = np.random.default_rng(0).integers(3, size=(5, 2))
    a, _ = sync.reset(seed=7)
    b, _ = spawned.reset(seed=7)  # per-env seeds 7, 8 in both
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1])
    for action in actions:
        a, *_ = sync.step(action)
        b, *_ = spawned.step(action)
        np.testing.assert_array_equal(a, b)
    sync.close()
    spawned.close()


class Nested(gymnasium.Env):
    """An image-like observation: not a flat Box."""

    observation_space = gymnasium.spaces.Box(0, 1, (3, 3), np.float32)
    action_space = gymnasium.spaces.Discrete(2)


gymnasium.register("TestNested-v0", entry_point=Nested)


@pytest.mark.parametrize(("env_id", "goal", "message"), [
    ("MountainCarContinous-v0", {}, "data.env_id: gymnasium does not know 'MountainCarContinous-v0' (closest "
                                    "registered: MountainCarContinuous-v0"),
    ("MountainCarContinuous-v0", {"dims": [0, 2]}, "data.goal.dims: [2] outside the observation of "
                                                   "MountainCarContinuous-v0 (2 entries: 0 to 1)"),
    ("MountainCarContinuous-v0", {"low": [-1.2, 0.07]}, "data.goal.low[1] (0.07) must be below data.goal.high[1] (0.07)"),
    ("MountainCarContinuous-v0", {"reach": 0.0}, "data.goal.reach must be radius or a distance > 0 in goal units, got 0.0"),
    ("MountainCarContinuous-v0", {"reach": "radiu"}, "data.goal.reach must be radius or a distance > 0"),
    ("MountainCarContinuous-v0", {"low": [-1.2]}, "data.goal.low has 1 values, the goal 2 dimensions"),
    ("MountainCarContinuous-v0", {"rho": -0.1}, "data.goal.rho must be positive"),
    ("MountainCarContinuous-v0", {"names": ["x"]}, "data.goal.names has 1 names, the goal 2 dimensions (dims [0, 1])"),
    ("MountainCarContinuous-v0", {"with_action": True}, "data.goal.with_action: MountainCarContinuous-v0's actions are "
                                                        "continuous"),
    ("MountainCarContinuous-v0", {"dims": "achieved_goal"}, "data.goal.dims: MountainCarContinuous-v0 has no "
                                                            "observation entry 'achieved_goal'"),
    ("TestNested-v0", {}, "data.env_id: TestNested-v0's observation space is Box(0.0, 1.0, (3, 3), float32): "
                          "sun_lightning takes a flat Box or a goal dict"),
    ("TestDictPoint-v0", {"dims": "observation", "low": None}, "data.goal.low: TestDictPoint-v0's observation "
                                                               "space leaves the goal unbounded ([-inf, -inf])"),
    ("TestDictPoint-v0", {"dims": "desired_goal"}, "data.goal.dims: TestDictPoint-v0 has no observation entry "
                                                   "'desired_goal' (its entries are observation, achieved_goal)"),
])
def test_a_goal_space_that_cannot_work_names_the_problem(env_id, goal, message):
    config = {"dims": [0, 1], "low": [-1.2, -0.07], "high": [0.6, 0.07], **goal}
    with pytest.raises(ConfigError) as error:
        CustomEnv(env_id, GoalConfig(**config))
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("args", "message"), [
    (["--data.env_id", "MountainCarContinous-v0"], "error: data.env_id: gymnasium does not know"),
    (["--data.goal.dims", "[0, 5]"], "error: data.goal.dims: [5] outside the observation"),
    (["--data.goal.high", "[-1.2, 0.07]"], "error: data.goal.low[0] (-1.2) must be below data.goal.high[0] (-1.2)"),
    (["--data.goal.reach", "-0.5"], "error: data.goal.reach must be radius or a distance > 0 in goal units, got -0.5"),
    (["--model", "sun_lightning.learners.dqn.DQNSVF"], "error: model.class_path: DQNSVF cannot act in "
     "MountainCarContinuous-v0, which has continuous actions (a Box of 1): use sun_lightning.learners.td3.TD3SVF"),
    (["--data.env_id", "CartPole-v1", "--data.goal", "null"], "error: data.env_id: 'CartPole-v1' is a gymnasium id "
     "without a goal space: give one in data.goal (its dims, low, high and reach: docs/custom-envs.md)"),
    (["--data.env_package", "no_such_package"], "error: data.env_package: cannot import 'no_such_package'"),
])
def test_bad_input_is_one_line_with_exit_code_2(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["sun_lightning"])  # as on the command line (LightningCLI warns about pytest's)
    assert entry(["fit", "--config", str(MCC), *args]) == 2  # what `python -m sun_lightning` exits with
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith(message), lines


@pytest.mark.slow  # a fresh interpreter's imports; entry() above is the same path in-process
def test_the_command_line_exits_with_2_and_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's package, whichever the venv installed
    proc = subprocess.run([sys.executable, "-m", "sun_lightning", "fit", "--config", str(MCC), "--data.goal.dims",
                           "[0, 5]"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    assert lines == ["error: data.goal.dims: [5] outside the observation of MountainCarContinuous-v0 (2 entries: "
                     "0 to 1) (see `python -m sun_lightning fit --help`)"], lines


def test_the_discrete_example_with_a_td3_learner_names_the_dqn_variant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^model.class_path: TD3SVF cannot act in Acrobot-v1, which has 3 discrete "
                                          r"actions: use sun_lightning.learners.dqn.DQNSVF"):
        main(["--config", str(ACROBOT), "--model", "sun_lightning.learners.td3.TD3SVF",
              "--trainer.logger", "false"], run=False)


def _hand_coverage(exploration, bins: int = 50) -> float:
    """Coverage over the configured bounds counted by hand: distinct (bin per goal dim[, action]) cells of D."""
    space = exploration.goal_space
    entries = exploration.storage.get(torch.arange(len(exploration.storage)))
    goals = space.project(entries[keys.OBS]).numpy()
    low, high = np.array(space.low), np.array(space.high)
    index = np.clip(np.floor((goals - low) / (high - low) * bins), 0, bins - 1).astype(int)
    cells = {tuple(row) for row in index} if not space.discrete else \
        {(*row, int(a)) for row, a in zip(index, entries[keys.ACTION].numpy())}
    return len(cells) / (bins ** space.goal_dim * max(space.num_actions, 1))


def _fit_example(fit, config: Path, tmp_path: Path, *extra: str):
    store = f"sqlite:///{tmp_path}/mlruns/mlflow.db"  # absolute: MLflow keeps one engine per URI in a process
    cli = fit(config, "--data.total_frames", "600", "--data.warmup_frames", "400", "--data.num_envs", "4",
              "--metrics.log_every_frames", "200", *QUIET, "--trainer.logger.init_args.tracking_uri", store, *extra)
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    history = client.get_metric_history(run.info.run_id, "explore/visits/coverage")
    return cli, run, {m.step: m.value for m in history}


@pytest.mark.slow
def test_the_mountain_car_continuous_example_fits_and_logs_coverage_over_its_bounds(fit, tmp_path):
    cli, run, coverage = _fit_example(fit, MCC, tmp_path, "--data.updates_per_frame", "0.25", *SMALL_TD3)
    exploration = cli.datamodule.exploration
    assert exploration.frames == 600 and cli.model.updates > 0 and isinstance(exploration.vector_env, gymnasium.vector.SyncVectorEnv)
    assert run.info.run_name == "MountainCarContinuous-sun-seed0"
    assert run.data.params["data.goal.low"] == "[-1.2, -0.07]"
    assert sorted(coverage) == [200, 400, 600]
    assert coverage[600] == pytest.approx(_hand_coverage(exploration), abs=1e-9) and coverage[600] > 0
    assert math.isfinite(run.data.metrics["train/loss/td"])


def test_the_acrobot_example_fits_and_logs_coverage_over_its_bounds(fit, tmp_path):
    cli, run, coverage = _fit_example(fit, ACROBOT, tmp_path, "--data.updates_per_frame", "0.1")
    exploration = cli.datamodule.exploration
    assert exploration.frames == 600 and cli.model.updates == 20 and exploration.goal_space.num_actions == 3
    assert sorted(coverage) == [200, 400, 600]
    assert coverage[600] == pytest.approx(_hand_coverage(exploration), rel=1e-6) and coverage[600] > 0
    assert math.isfinite(run.data.metrics["train/loss/td"])


@pytest.mark.slow
def test_a_goal_dict_env_trains_with_its_achieved_goal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "dict_point.yaml"
    config.write_text(
        "model:\n  class_path: sun_lightning.learners.td3.TD3SVF\n"
        "data:\n  env_id: TestDictPoint-v0\n  goal:\n    low: [-1, -1]\n    high: [1, 1]\n    reach: 0.05\n"
        "  num_envs: 4\n  total_frames: 600\n  warmup_frames: 200\n  updates_per_frame: 0.1\n")
    cli = main(["--config", str(config), "--metrics.log_every_frames", "200", *QUIET, *SMALL_TD3,
                "--trainer.logger", "false"], run=False)
    selected: list[torch.Tensor] = []
    cli.datamodule.events.subscribe("goals", lambda goals: selected.append(goals[keys.GOAL][goals[keys.GOAL_SELECTED]]))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    exploration = cli.datamodule.exploration
    assert exploration.goal_space.goal_dims == (2, 3) and exploration.frames == 600 and cli.model.updates == 40
    stored = exploration.storage.get(torch.arange(len(exploration.storage)))[keys.OBS]
    positions = stored[:, 2:4]
    # every selected goal is the achieved_goal (position) of a stored entry, never its velocity or the task
    goals = torch.cat(selected)
    assert len(goals) > 0
    assert all(bool((positions == goal).all(-1).any()) for goal in goals)
    assert positions.abs().max() <= 1 and positions.std(0).min() > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("vector", ["sync", "async"])
def test_a_custom_env_run_resumes_from_its_checkpoint(vector, tmp_path, monkeypatch):
    """Sync vector envs pickle with the checkpoint and continue exactly; async ones (processes) restart their
    episodes on resume, with a warning, and the run still reaches its frames."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(ACROBOT), "--data.vector", vector, "--data.num_envs", "2",
            "--data.warmup_frames", "400", "--data.updates_per_frame", "0.1", "--metrics.log_every_frames", "200",
            *QUIET, "--trainer.logger", "false", "--checkpoint.every_frames", "200", "--checkpoint.keep", "10"]

    def final(cli) -> dict[str, float]:
        logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
        return {k: v for k, v in logger.final.items() if not k.startswith("perf/")}  # wall-clock

    whole = final(main([*args, "--data.total_frames", "800", "--checkpoint.dirpath", str(tmp_path / "whole")]))
    main([*args, "--data.total_frames", "600", "--checkpoint.dirpath", str(tmp_path / "part")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = main([*args, "--data.total_frames", "800", "--checkpoint.dirpath", str(tmp_path / "part"),
                        "--ckpt_path", "last"])
    assert resumed.datamodule.exploration.frames == 800
    restarted = [w for w in caught if "episodes in progress restart on resume" in str(w.message)]
    if vector == "sync":
        assert not restarted and final(resumed) == whole
    else:
        assert restarted and math.isfinite(final(resumed)["train/loss/td"])


def _doc_configs() -> dict[str, str]:
    text = (ROOT / "docs" / "custom-envs.md").read_text()
    return dict(re.findall(r"```yaml\n# (conf/custom/\S+)\n(.*?)```", text, re.S))


def test_the_docs_show_the_example_configs_as_they_are():
    configs = _doc_configs()
    assert set(configs) == {"conf/custom/mountain_car_continuous.yaml", "conf/custom/acrobot.yaml"}
    for path, text in configs.items():
        assert (ROOT / path).read_text() == text, path
