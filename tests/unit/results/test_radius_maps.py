"""Pseudocounts at several radii on one run's data (the paper's Figure 22): each count against a brute-force count on
fixed goals, the picture's bins against a loop, and the figure drawn from checkpoints holding a small fixed D."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sun_lightning.results import radius_maps
from sun_lightning.results.goal_grid import GoalGrid
from tests.helpers import write_run_checkpoint

MOUNTAIN_CAR, PENDULUM, THREE_ROOM = "sun_lightning/MountainCar-v0", "sun_lightning/Pendulum-v0", "sun_lightning/ThreeRoom-v0"
PNG = b"\x89PNG\r\n\x1a\n"


def brute_pseudocounts(x: np.ndarray, rho: float) -> np.ndarray:
    sigma = x.std(0)  # population std over all of D
    st = np.maximum(sigma, np.median(sigma))
    st[st == 0] = 1.0
    d2 = (((x[:, None, :] - x[None, :, :]) / st) ** 2).sum(-1)
    return (d2 <= rho**2).sum(1)


def goals(n: int = 300, seed: int = 0) -> torch.Tensor:
    """Clustered goals in three features of different spreads and one constant feature (the median floor and the
    fallback to 1 of the standardization both matter)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 4)) * [1.0, 0.05, 10.0, 0.0]
    x = centres[rng.integers(0, 4, n)] + rng.normal(size=(n, 4)) * [0.3, 0.01, 2.0, 0.0]
    x[:, 3] = 2.5
    x[::7] = x[1]  # exact duplicates
    return torch.from_numpy(x)


@pytest.mark.parametrize("rho", [0.0, 0.01, 0.1, 0.5, 3.0])
def test_pseudocounts_against_brute_force(rho):
    x = goals()
    got = radius_maps.pseudocounts(x, rho).numpy()
    want = brute_pseudocounts(x.numpy(), rho)
    np.testing.assert_array_equal(got, want)
    assert got.min() >= 1  # itself included
    if rho == 0.0:
        assert got[1] == len(range(0, 300, 7)) + 1  # x[1] and its copies at 0, 7, 14, …


def test_pseudocounts_grow_with_the_radius_to_all_of_d():
    x = goals(200, seed=3)
    means = [radius_maps.pseudocounts(x, rho).double().mean().item() for rho in (0.01, 0.1, 0.5, 100.0)]
    assert means == sorted(means) and means[-1] == 200


def test_true_counts_against_binning_by_hand():
    rng = np.random.default_rng(1)
    x = np.stack([rng.uniform(-1.2, 0.6, 500), rng.normal(0, 0.02, 500)], 1)
    x[:5] = [[-1.2, -0.07], [0.6, 0.07], [0.6, 0.5], [-5.0, 0.0], [0.0, 0.0]]  # edges and beyond: clamped
    cell = np.clip(np.floor((x - [-1.2, -0.07]) / ([1.8, 0.14] / np.array(50))), 0, 49).astype(int)
    key = cell[:, 0] * 50 + cell[:, 1]
    want = np.array([(key == k).sum() for k in key])
    got = radius_maps.true_counts(torch.from_numpy(x), MOUNTAIN_CAR).numpy()
    np.testing.assert_array_equal(got, want)


def test_mean_image_against_a_loop():
    grid = GoalGrid.of(MOUNTAIN_CAR)
    rng = np.random.default_rng(2)
    x = torch.from_numpy(np.stack([rng.uniform(-1.2, 0.6, 400), rng.uniform(-0.07, 0.07, 400)], 1))
    counts = torch.from_numpy(rng.integers(1, 50, 400))
    image = radius_maps.mean_image(grid, x, counts)
    cells = grid.cells(x).numpy()
    for cell in range(grid.num_cells):
        row, col = divmod(cell, grid.shape[1])
        inside = counts.numpy()[cells == cell]
        if len(inside):
            assert image[row, col] == pytest.approx(inside.mean())
        else:
            assert np.isnan(image[row, col])
    # one bin with a known set of counts: the goals at the bottom left corner
    corner = torch.tensor([[-1.2, -0.07], [-1.19, -0.069]], dtype=torch.float64)
    assert radius_maps.mean_image(grid, corner, torch.tensor([2, 6]))[0, 0] == 4.0


def test_the_figure_has_a_column_per_run_and_a_row_per_radius(tmp_path):
    rng = np.random.default_rng(4)
    car = torch.from_numpy(np.stack([rng.uniform(-1.2, 0.6, 300), rng.uniform(-0.07, 0.07, 300)], 1)).float()
    theta = rng.uniform(-np.pi, np.pi, 200)
    pendulum = torch.from_numpy(np.stack([np.cos(theta), np.sin(theta), rng.normal(0, 2, 200)], 1)).float()
    write_run_checkpoint(tmp_path / "car.ckpt", MOUNTAIN_CAR, obs=car)
    write_run_checkpoint(tmp_path / "pendulum.ckpt", PENDULUM, obs=pendulum, frames=2000)
    data = radius_maps.stored_goals(tmp_path / "pendulum.ckpt")
    assert (data.env_id, data.frames, tuple(data.goals.shape)) == (PENDULUM, 2000, (200, 3))
    assert data.goals.dtype == torch.float64
    images = radius_maps.radius_images(data, (0.5, 0.1))
    assert list(images) == ["true counts (50 bins)", "pseudocount, ρ = 0.5", "pseudocount, ρ = 0.1"]
    grid = GoalGrid.of(PENDULUM)
    np.testing.assert_allclose(images["pseudocount, ρ = 0.1"],
                               radius_maps.mean_image(grid, data.goals, torch.from_numpy(
                                   brute_pseudocounts(data.goals.numpy(), 0.1))))
    out = tmp_path / "radii.png"
    radius_maps.main([str(tmp_path / "car.ckpt"), str(tmp_path / "pendulum.ckpt"), "--rho", "0.1", "0.5",
                      "--out", str(out)])
    assert out.read_bytes()[:8] == PNG
    fig = radius_maps.radius_figure({"car": radius_maps.stored_goals(tmp_path / "car.ckpt"), "pendulum": data}, (0.1, 0.5))
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0::2] == ["car\ntrue counts (50 bins)", "pseudocount, ρ = 0.5", "pseudocount, ρ = 0.1"]  # row by row
    assert titles[1] == "pendulum\ntrue counts (50 bins)" and len(titles) == 6


def test_bad_checkpoints_are_named(tmp_path):
    write_run_checkpoint(tmp_path / "grid.ckpt", THREE_ROOM, obs=torch.eye(72)[:5])
    with pytest.raises(ValueError, match="counts its goals exactly"):
        radius_maps.stored_goals(tmp_path / "grid.ckpt")
    write_run_checkpoint(tmp_path / "empty.ckpt", MOUNTAIN_CAR)
    with pytest.raises(ValueError, match="empty replay buffer"):
        radius_maps.stored_goals(tmp_path / "empty.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="not a checkpoint of a sun_lightning run"):
        radius_maps.stored_goals(tmp_path / "other.ckpt")
    for path in ("missing.ckpt", "grid.ckpt"):  # one line naming the problem, no traceback
        with pytest.raises(SystemExit) as exited:
            radius_maps.main([str(tmp_path / path), "--out", str(tmp_path / "x.png")])
        assert exited.value.code == 2
