"""Tests for coverage/entropy and k-NN entropy metrics (SPEC §7)."""

import math

import pytest
import torch

from sun_lightning.metrics.coverage import (
    binned_cells,
    cell_coverage_entropy,
    coverage_entropy_from_cells,
    num_binned_cells,
    visit_histogram,
)
from sun_lightning.metrics.knn_entropy import knn_entropy

# --------------------------------------------------------------------------- coverage / entropy


def test_uniform_over_half_the_cells():
    n = 16
    counts = torch.zeros(n, dtype=torch.long)
    counts[: n // 2] = 7
    cov, ent = cell_coverage_entropy(counts)
    assert cov == pytest.approx(0.5)
    assert ent == pytest.approx(math.log(n / 2) / math.log(n))


def test_non_uniform_counts_and_valid_mask():
    counts = torch.tensor([1, 3, 0, 0, 100, 0])
    valid = torch.tensor([True, True, True, True, False, False])  # cell 4 is a wall
    cov, ent = cell_coverage_entropy(counts, valid)
    assert cov == pytest.approx(2 / 4)
    p = torch.tensor([0.25, 0.75])
    assert ent == pytest.approx(-(p * p.log()).sum().item() / math.log(4))


def test_full_uniform_and_degenerate_cases():
    assert cell_coverage_entropy(torch.full((5,), 3)) == pytest.approx((1.0, 1.0))
    assert cell_coverage_entropy(torch.zeros(5)) == (0.0, 0.0)
    assert cell_coverage_entropy(torch.tensor([0, 9, 0])) == pytest.approx((1 / 3, 0.0))
    assert cell_coverage_entropy(torch.tensor([4]), torch.tensor([False])) == (0.0, 0.0)


def test_binning_edges():
    low, high, bins = [0.0, -1.0], [1.0, 1.0], 50
    w0, w1 = 1 / 50, 2 / 50
    x = torch.tensor(
        [
            [0.0, -1.0],  # low -> bin 0 in both dims
            [1.0, 1.0],  # high -> last bin
            [3 * w0 - 1e-9, -1.0 + 10 * w1 - 1e-9],  # just below an edge
            [3 * w0, -1.0 + 10 * w1],  # exactly on the edge
            [-5.0, 7.0],  # outside: clamped into edge bins
        ],
        dtype=torch.float64,
    )
    cells = binned_cells(x, low, high, bins)
    expected = torch.tensor([0 * 50 + 0, 49 * 50 + 49, 2 * 50 + 9, 3 * 50 + 10, 0 * 50 + 49])
    torch.testing.assert_close(cells, expected)
    assert num_binned_cells(2, 50) == 2500
    assert int(cells.max()) < num_binned_cells(2, 50)


def test_binning_with_actions_and_histogram():
    x = torch.tensor([[0.05], [0.05], [0.95], [0.55]])
    action = torch.tensor([0, 2, 1, 2])
    cells = binned_cells(x, 0.0, 1.0, bins=10, action=action, num_actions=3)
    torch.testing.assert_close(cells, torch.tensor([0, 2, 9 * 3 + 1, 5 * 3 + 2]))
    n = num_binned_cells(1, 10, 3)
    assert n == 30
    hist = visit_histogram(torch.cat([cells, cells[:1]]), n)
    assert hist.shape == (30,) and hist[0] == 2 and hist.sum() == 5
    cov, ent = cell_coverage_entropy(hist)
    assert cov == pytest.approx(4 / 30)
    assert coverage_entropy_from_cells(torch.cat([cells, cells[:1]]), n) == pytest.approx((cov, ent))
    with pytest.raises(ValueError):
        binned_cells(x, 0.0, 1.0, bins=10, action=action)
    with pytest.raises(ValueError):
        visit_histogram(torch.tensor([30]), n)


# --------------------------------------------------------------------------- k-NN entropy


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("d", [1, 2])
def test_knn_uniform_unit_cube_is_zero(d):
    x = torch.rand(10_000, d, generator=_gen(d), dtype=torch.float64)
    assert knn_entropy(x, 0.0, 1.0) == pytest.approx(0.0, abs=0.05)


def test_knn_uniform_square_side_two():
    x = 2 * torch.rand(10_000, 2, generator=_gen(3), dtype=torch.float64)
    assert knn_entropy(x, [0.0, 0.0], [2.0, 2.0]) == pytest.approx(math.log(4), abs=0.05)


@pytest.mark.parametrize("d,sigma", [(2, 0.5), (4, 2.0)])
def test_knn_gaussian(d, sigma):
    x = sigma * torch.randn(10_000, d, generator=_gen(10 + d), dtype=torch.float64)
    expected = d / 2 * math.log(2 * math.pi * math.e * sigma**2)
    # low/high None: data min/max bounds, undone by the log-width correction.
    assert knn_entropy(x) == pytest.approx(expected, abs=0.1)


def test_knn_normalization_correction_is_exact():
    x = torch.rand(2_000, 3, generator=_gen(4), dtype=torch.float64)
    h1 = knn_entropy(x, 0.0, 1.0)
    h3 = knn_entropy(3 * x, 0.0, 3.0)
    assert h3 - h1 == pytest.approx(3 * math.log(3), abs=1e-9)
    # Data-derived bounds behave the same way.
    assert knn_entropy(3 * x) - knn_entropy(x) == pytest.approx(3 * math.log(3), abs=1e-9)


def test_knn_subsampling_reproducible_and_accurate():
    x = torch.rand(12_000, 2, generator=_gen(5), dtype=torch.float64)
    kw = dict(low=0.0, high=1.0, subsamples=3, subsample_size=4_000)
    a = knn_entropy(x, generator=_gen(7), **kw)
    b = knn_entropy(x, generator=_gen(7), **kw)
    assert a == b
    assert a == pytest.approx(0.0, abs=0.05)


def test_knn_discrete_action_decomposition():
    g = _gen(6)
    n0, n1 = 3_000, 7_000
    s0 = torch.rand(n0, 2, generator=g, dtype=torch.float64)  # H(s|a=0) = 0
    s1 = 2 * torch.rand(n1, 2, generator=g, dtype=torch.float64)  # H(s|a=1) = log 4
    x = torch.cat([s0, s1])
    action = torch.cat([torch.zeros(n0, dtype=torch.long), torch.ones(n1, dtype=torch.long)])
    p = torch.tensor([0.3, 0.7], dtype=torch.float64)
    h_a = -(p * p.log()).sum().item()
    h = knn_entropy(x, 0.0, 2.0, action=action)
    assert h == pytest.approx(h_a + 0.7 * math.log(4), abs=0.06)
    # Exactly the weighted sum of the per-action estimates under the same bounds.
    parts = [knn_entropy(s, 0.0, 2.0) for s in (s0, s1)]
    assert h == pytest.approx(h_a + 0.3 * parts[0] + 0.7 * parts[1], abs=1e-9)


def test_knn_errors_and_duplicates():
    with pytest.raises(ValueError):
        knn_entropy(torch.rand(3, 2))
    x = torch.zeros(10, 2)
    x[5:] = 1.0  # exact duplicates: finite (very negative) thanks to the distance floor
    assert math.isfinite(knn_entropy(x))


def test_curve_auc_is_the_trapezoid_mean_height():
    from sun_lightning.metrics.auc import curve_auc

    # (0, 0) → (10, 1) → (30, 1): area 5 + 20 = 25 over 30 frames
    assert curve_auc([0, 10, 30], [0.0, 1.0, 1.0]) == pytest.approx(25 / 30)
    assert curve_auc([30, 0, 10], [1.0, 0.0, 1.0]) == pytest.approx(25 / 30)  # any order
    assert curve_auc([5], [0.3]) == 0.3
    with pytest.raises(ValueError, match="as many steps"):
        curve_auc([1, 2], [0.5])
