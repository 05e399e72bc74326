"""The figures a report draws from its runs' final checkpoints: the learned SVF where the environment has a picture of
it, the pseudocounts at several radii where a true-count run's data is there, nothing where a checkpoint is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sun_lightning.envs.registry import goal_space
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.results.checkpoint_figures import checkpoint_figures
from sun_lightning.study.plan import parse_grid, plan
from sun_lightning.study.report import true_count_methods
from tests.helpers import write_run_checkpoint

ROOT = Path(__file__).resolve().parents[3]
MOUNTAIN_CAR, CART_POLE = "sun_lightning/MountainCar-v0", "sun_lightning/CartPole-v0"
PNG = b"\x89PNG\r\n\x1a\n"


def car_run(path: Path, env_id: str = MOUNTAIN_CAR) -> Path:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    obs = torch.from_numpy(np.stack([rng.uniform(-1.2, 0.6, 200), rng.uniform(-0.07, 0.07, 200)], 1)).float()
    if env_id == CART_POLE:
        obs = torch.from_numpy(rng.normal(0, 0.5, (200, 4))).float()
    write_run_checkpoint(path, env_id, DQNSVF(goal_space=goal_space(env_id)), obs=obs)
    return path


def test_both_figures_from_checkpoints_that_are_there(tmp_path):
    run = car_run(tmp_path / "run.ckpt")
    written, titles = checkpoint_figures(tmp_path, MOUNTAIN_CAR, {"SUN": run, "Random": tmp_path / "missing.ckpt"},
                                         {"counts=binned": run})
    assert written == [tmp_path / "svf.png", tmp_path / "pseudocount_radii.png"]
    assert [name for _, name in titles] == ["svf.png", "pseudocount_radii.png"]
    assert all(path.read_bytes()[:8] == PNG for path in written)


def test_nothing_where_there_is_no_picture_or_no_checkpoint(tmp_path):
    assert checkpoint_figures(tmp_path, MOUNTAIN_CAR, {"SUN": tmp_path / "missing.ckpt"}, {}) == ([], [])
    run = car_run(tmp_path / "pole.ckpt", CART_POLE)  # CartPole's 4-D state is not a point of its 2-D goal picture
    assert checkpoint_figures(tmp_path, CART_POLE, {"SUN": run}, {}) == ([], [])
    assert not (tmp_path / "svf.png").exists()


def test_true_count_runs_are_the_binned_grid_variants():
    config = str(ROOT / "conf/mountain_car.yaml")
    specs = plan([config], ["sun", "random"], parse_grid(["data.counts=binned", "data.rho=0.01,0.5"]), [0, 1])
    assert true_count_methods(specs) == {"counts=binned"}
    assert true_count_methods(plan([config], ["sun"], {}, [0])) == set()
