"""The learned SVF drawn whole (the paper's Figure 37): each block and pixel against the value function it shows, on
an analytic learner; walls, ensembles and goal actions; a real learner rebuilt from a checkpoint gives its own values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sun_lightning.envs.registry import goal_space
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.results import svf_maps
from sun_lightning.results.goal_grid import GoalGrid
from tests.helpers import write_run_checkpoint

MOUNTAIN_CAR, PENDULUM = "sun_lightning/MountainCar-v0", "sun_lightning/Pendulum-v0"
FOUR_ROOM = "sun_lightning/FourRoomStuck-v0"
PNG = b"\x89PNG\r\n\x1a\n"


class Analytic:
    """A learner whose V(s, g, g_a) is a closed form: exp(−|s − g|²) · (g_a + 1) / |A| (members: × (1 ± 0.5))."""

    device = torch.device("cpu")

    def __init__(self, num_actions: int = 0, members: int = 0):
        self.num_actions, self.members = num_actions, members

    def value(self, s: torch.Tensor, g: torch.Tensor, a: torch.Tensor | None) -> torch.Tensor:
        v = torch.exp(-((s - g) ** 2).sum(-1))
        return v if a is None else v * (a + 1) / self.num_actions

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        v = self.value(obs[:, None, :].double(), goal.double(), goal_action)
        if self.members:
            v = torch.stack([v * (1 + 0.5 * (-1) ** e) for e in range(self.members)])
        return v.float(), None


def test_each_block_is_one_goal_and_each_pixel_one_state():
    learner = Analytic(num_actions=3)
    image = svf_maps.nested_values(learner, MOUNTAIN_CAR, goals_per_axis=3, states_per_axis=4)
    assert image.shape == (12, 12)
    grid = GoalGrid.of(MOUNTAIN_CAR)  # position in [−1.2, 0.6] along x, velocity in [−0.07, 0.07] along y
    goal_x = [-1.2 + 0.6 * (j + 0.5) for j in range(3)]
    goal_y = [-0.07 + 0.14 / 3 * (i + 0.5) for i in range(3)]
    state_x = [-1.2 + 0.45 * (v + 0.5) for v in range(4)]
    state_y = [-0.07 + 0.035 * (u + 0.5) for u in range(4)]
    assert grid.low == (-1.2, -0.07)
    for i in range(3):
        for j in range(3):
            for u in range(4):
                for v in range(4):
                    # the best goal action (g_a = 2) gives exp(−d²) · 3 / 3
                    want = math.exp(-((state_x[v] - goal_x[j]) ** 2 + (state_y[u] - goal_y[i]) ** 2))
                    assert image[i * 4 + u, j * 4 + v] == pytest.approx(want, rel=1e-5)


def test_an_ensemble_shows_its_members_mean():
    single = svf_maps.nested_values(Analytic(3), MOUNTAIN_CAR, 2, 3)
    ensemble = svf_maps.nested_values(Analytic(3, members=2), MOUNTAIN_CAR, 2, 3)  # × 1.5 and × 0.5: mean × 1
    np.testing.assert_allclose(ensemble, single, rtol=1e-6)


def test_pendulum_goals_are_angles_of_the_plane():
    grid = GoalGrid.of(PENDULUM)
    goals = svf_maps.plane_goals(grid, 2).double()
    # centres at θ = ±π/2, θ̇ = ±4 (bounds [−π, π] × [−8, 8]); rows are θ̇, columns θ
    theta = torch.tensor([-math.pi / 2, math.pi / 2, -math.pi / 2, math.pi / 2], dtype=torch.float64)
    want = torch.stack([torch.cos(theta), torch.sin(theta), torch.tensor([-4.0, -4.0, 4.0, 4.0], dtype=torch.float64)], 1)
    torch.testing.assert_close(goals, want, atol=1e-6, rtol=0)
    image = svf_maps.nested_values(Analytic(goal_space(PENDULUM).num_actions), PENDULUM, 2, 2)
    assert image[0, 0] == pytest.approx(1.0) and image[0, 1] == pytest.approx(math.exp(-4.0), rel=1e-5)  # same θ̇, θ ± π


def test_gridworld_blocks_are_tiles_with_walls_left_out():
    grid = GoalGrid.of(FOUR_ROOM)
    image = svf_maps.nested_values(Analytic(num_actions=4), FOUR_ROOM)
    rows, cols = grid.shape
    assert image.shape == (rows * rows, cols * cols)
    wall = grid.wall
    free = np.argwhere(~wall)
    (a_r, a_c), (b_r, b_c) = free[0], free[-1]
    # one-hot states and goals: V = 1 from the goal's own tile, exp(−2) from any other
    assert image[a_r * rows + a_r, a_c * cols + a_c] == pytest.approx(1.0)
    assert image[a_r * rows + b_r, a_c * cols + b_c] == pytest.approx(math.exp(-2.0), rel=1e-5)
    w_r, w_c = np.argwhere(wall)[0]
    assert np.isnan(image[w_r * rows: (w_r + 1) * rows, w_c * cols: (w_c + 1) * cols]).all()  # a wall as goal
    assert np.isnan(image[a_r * rows + w_r, a_c * cols + w_c])  # a wall as state
    assert np.isfinite(image).sum() == (~wall).sum() ** 2


@pytest.mark.parametrize("env_id", ["sun_lightning/CartPole-v0", "sun_lightning/Acrobot-v0"])
def test_states_that_are_not_points_of_the_picture_are_refused(env_id):
    with pytest.raises(ValueError, match="no picture"):
        svf_maps.nested_values(Analytic(), env_id)


def test_a_learner_rebuilt_from_its_checkpoint_gives_its_values(tmp_path):
    torch.manual_seed(0)
    learner = DQNSVF(goal_space=goal_space(MOUNTAIN_CAR)).eval()
    learner.observe(torch.tensor([[-0.5, 0.01], [0.3, -0.02], [-1.0, 0.05]]))  # running statistics: not at their init
    write_run_checkpoint(tmp_path / "run.ckpt", MOUNTAIN_CAR, learner)
    rebuilt, env_id = svf_maps.load_learner(tmp_path / "run.ckpt")
    assert env_id == MOUNTAIN_CAR and type(rebuilt) is DQNSVF and not rebuilt.training
    want = svf_maps.nested_values(learner, MOUNTAIN_CAR, 2, 3)
    np.testing.assert_array_equal(svf_maps.nested_values(rebuilt, MOUNTAIN_CAR, 2, 3), want)
    assert np.ptp(want) > 0  # a picture, not a constant
    out = tmp_path / "svf.png"
    svf_maps.main([str(tmp_path / "run.ckpt"), "--goals", "2", "--states", "3", "--out", str(out)])
    assert out.read_bytes()[:8] == PNG
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="not a checkpoint of a sun_lightning run"):
        svf_maps.load_learner(tmp_path / "other.ckpt")


def test_an_ensemble_is_rebuilt_with_its_own_and_its_bases_arguments(tmp_path):
    from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF

    assert {"ensemble_size", "gamma", "width"} <= svf_maps.accepted_arguments(EnsembleDQNSVF)
    assert "ensemble_size" not in svf_maps.accepted_arguments(DQNSVF)
    torch.manual_seed(1)
    learner = EnsembleDQNSVF(goal_space=goal_space(MOUNTAIN_CAR), ensemble_size=3, width=32).eval()
    write_run_checkpoint(tmp_path / "run.ckpt", MOUNTAIN_CAR, learner)
    rebuilt, _ = svf_maps.load_learner(tmp_path / "run.ckpt")
    assert rebuilt.hparams.ensemble_size == 3 and rebuilt.hparams.width == 32
    np.testing.assert_array_equal(svf_maps.nested_values(rebuilt, MOUNTAIN_CAR, 2, 2),
                                  svf_maps.nested_values(learner, MOUNTAIN_CAR, 2, 2))


def test_the_command_names_a_checkpoint_it_cannot_draw(tmp_path, capsys):
    write_run_checkpoint(tmp_path / "pole.ckpt", "sun_lightning/CartPole-v0",
                         DQNSVF(goal_space=goal_space("sun_lightning/CartPole-v0")))
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    for path, says in ((tmp_path / "pole.ckpt", "no picture"), (tmp_path / "other.ckpt", "not a checkpoint of"),
                       (tmp_path / "missing.ckpt", "no checkpoint at")):
        with pytest.raises(SystemExit) as exited:
            svf_maps.main([str(path), "--out", str(tmp_path / "x.png")])
        assert exited.value.code == 2 and says in capsys.readouterr().err
