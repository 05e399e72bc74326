"""Resume for every env a user brings: the classes of the modules a run's env is built from (``data.env_package``,
the id's registered entry point) are trusted in its checkpoint, nothing else; a run of a user's own package and a
Gymnasium-Robotics maze run each resume to the uninterrupted run's numbers."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from sun_lightning.checkpoints import safe_pickle
from sun_lightning.errors import ConfigError
from tests.helpers import final_metrics

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["--metrics.verbose", "false", "--trainer.enable_progress_bar", "false", "--results.fractions", "[1.0]",
         "--trainer.logger", "false"]
#: The TD3 variant at a size a few hundred CPU frames can afford.
SMALL_TD3 = ["--model.init_args.hidden", "32", "--model.init_args.maxout_width", "64",
             "--model.init_args.head_width", "32", "--model.init_args.batch_size", "32", "--model.init_args.horizon", "8"]

#: A user's package: its env keeps a helper object of another of its modules (both pickle with the env's state).
PACKAGE = {
    "__init__.py": """
        import gymnasium
        gymnasium.register("WalkerPkg/Walk-v0", entry_point="walker_pkg.walk:Walk", max_episode_steps=25)
    """,
    "body.py": """
        class Body:
            def __init__(self):
                self.x, self.y = 0.0, 0.0
    """,
    "walk.py": """
        import gymnasium
        import numpy as np
        from walker_pkg.body import Body

        class Walk(gymnasium.Env):
            observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gymnasium.spaces.Discrete(4)

            def __init__(self):
                self.body = Body()

            def _obs(self):
                return np.array([self.body.x, self.body.y], dtype=np.float32)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.body.x, self.body.y = self.np_random.uniform(-0.1, 0.1, 2)
                return self._obs(), {}

            def step(self, action):
                dx, dy = [(0.1, 0), (-0.1, 0), (0, 0.1), (0, -0.1)][int(action)]
                noise = self.np_random.normal(0, 0.02, 2)
                self.body.x = float(np.clip(self.body.x + dx + noise[0], -1, 1))
                self.body.y = float(np.clip(self.body.y + dy + noise[1], -1, 1))
                return self._obs(), 0.0, False, False, {}
    """,
}
USER_CONFIG = """
model:
  class_path: sun_lightning.learners.dqn.DQNSVF
data:
  env_id: WalkerPkg/Walk-v0
  env_package: walker_pkg
  goal: {low: [-1, -1], high: [1, 1], reach: 0.1}
  num_envs: 2
  warmup_frames: 200
  updates_per_frame: 0.1
metrics:
  log_every_frames: 100
"""


@pytest.fixture
def walker_pkg(tmp_path, monkeypatch) -> Path:
    """The user's package on ``sys.path`` and its config."""
    for name, text in PACKAGE.items():
        path = tmp_path / "src" / "walker_pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    config = tmp_path / "walk.yaml"
    config.write_text(USER_CONFIG)
    return config


def _resumes_exactly(tmp_path, monkeypatch, args: list[str], total: int, part: int) -> None:
    """The run of ``total`` frames, and one stopped at ``part`` then resumed with ``--ckpt_path last`` to ``total``,
    end with the same metrics; the resume did load the checkpoint's env state."""
    from sun_lightning.envs import state
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)
    args = [*args, *QUIET, "--checkpoint.every_frames", "100", "--checkpoint.keep", "10"]
    whole = final_metrics(main([*args, "--data.total_frames", str(total), "--checkpoint.dirpath", "whole"]))
    main([*args, "--data.total_frames", str(part), "--checkpoint.dirpath", "part"])
    loaded = []
    load = state.load_env_state
    monkeypatch.setattr("sun_lightning.exploration.state.load_env_state",
                        lambda env, blob: (loaded.append(len(blob)), load(env, blob)))
    resumed = main([*args, "--data.total_frames", str(total), "--checkpoint.dirpath", "part", "--ckpt_path", "last"])
    assert resumed.datamodule.exploration.frames == total and len(loaded) == 1
    assert final_metrics(resumed) == whole


def test_a_run_of_a_users_own_package_resumes_to_the_uninterrupted_metrics(walker_pkg, tmp_path, monkeypatch):
    _resumes_exactly(tmp_path, monkeypatch, ["fit", "--config", str(walker_pkg)], total=500, part=300)


def test_only_the_env_modules_classes_are_trusted(walker_pkg, monkeypatch):
    """A blob naming a class of the env's package loads once the env was built from it; its functions, and every
    other module's globals, are still refused before anything runs."""
    monkeypatch.setattr(safe_pickle, "_trusted", set())  # as in a process that has built no such env yet
    from walker_pkg.body import Body

    from sun_lightning.envs.custom import env_modules

    import gymnasium
    import walker_pkg  # noqa: F401  (registers the id)

    assert env_modules("WalkerPkg/Walk-v0") == ("walker_pkg.walk",)
    assert env_modules("WalkerPkg/Walk-v0", "walker_pkg") == ("walker_pkg", "walker_pkg.walk")
    assert env_modules("walker_pkg:WalkerPkg/Walk-v0") == ("walker_pkg", "walker_pkg.walk")
    assert env_modules("CartPole-v1") == ("gymnasium.envs.classic_control.cartpole",)
    blob = pickle.dumps(Body())
    with pytest.raises(ConfigError, match=r"names walker_pkg.body.Body, which is not on the allow-list"):
        safe_pickle.loads(blob)  # before the env is built: not trusted
    safe_pickle.trust(*env_modules("WalkerPkg/Walk-v0", "walker_pkg"))
    assert isinstance(safe_pickle.loads(blob), Body)
    for name in ("walker_pkg.walk.np", "posix.system", "walker_pkg_other.Body"):
        module, _, attr = name.rpartition(".")
        forged = b"\x80\x04c" + module.encode() + b"\n" + attr.encode() + b"\n."  # GLOBAL module attr, STOP
        with pytest.raises(ConfigError, match=f"names {name}, which is not on the allow-list"):
            safe_pickle.loads(forged)
    assert gymnasium.spec("WalkerPkg/Walk-v0").entry_point == "walker_pkg.walk:Walk"


@pytest.mark.slow  # MuJoCo and the TD3 variant: three short fits, ≈ 1-3 min on a loaded 2-core machine
def test_a_gymnasium_robotics_maze_run_resumes_to_the_uninterrupted_metrics(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium_robotics", reason="the robotics extra (pip install -e '.[robotics]') is absent")
    args = ["fit", "--config", str(ROOT / "conf" / "custom" / "point_maze_umaze.yaml"), "--data.num_envs", "2",
            "--data.warmup_frames", "200", "--data.updates_per_frame", "0.1", "--eval.every_frames", "0",
            "--metrics.log_every_frames", "100", *SMALL_TD3]
    _resumes_exactly(tmp_path, monkeypatch, args, total=400, part=300)
