"""Tests for the observation encoders (SPEC §5c)."""

import math

import numpy as np
import pytest
import torch

from sun_lightning.networks.encoders import RBFEncoder, RunningMeanStd


# --------------------------------------------------------------------------- RunningMeanStd


@pytest.mark.parametrize("splits", [[500], [1, 499], [3, 100, 7, 390], [250, 250]])
def test_running_mean_std_matches_numpy(splits):
    rng = np.random.default_rng(0)
    data = rng.normal(loc=[3.0, -2.0, 0.5], scale=[0.1, 5.0, 2.0], size=(sum(splits), 3))
    rms = RunningMeanStd(3)
    start = 0
    for n in splits:
        rms.update(torch.as_tensor(data[start : start + n], dtype=torch.float32))
        start += n
    assert rms.count.item() == sum(splits)
    np.testing.assert_allclose(rms.mean.numpy(), data.astype(np.float32).mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rms.std.numpy(), data.astype(np.float32).std(0), rtol=1e-5)
    x = torch.as_tensor(data[:5], dtype=torch.float32)
    expected = (data[:5] - data.mean(0)) / data.std(0)
    np.testing.assert_allclose(rms(x).numpy(), expected, rtol=1e-4, atol=1e-4)


def test_running_mean_std_initial_and_floor_and_state_dict():
    rms = RunningMeanStd(2, eps=1e-3)
    x = torch.tensor([[1.0, 2.0]])
    torch.testing.assert_close(rms(x), x)  # identity before any data
    rms.update(torch.tensor([[5.0, 7.0], [5.0, 9.0]]))  # first dim constant
    torch.testing.assert_close(rms.std.float(), torch.tensor([1e-3, 1.0]))
    torch.testing.assert_close(rms(torch.tensor([[5.0, 8.0]])), torch.tensor([[0.0, 0.0]]))
    # Statistics are buffers: they round-trip through a state dict.
    sd = rms.state_dict()
    assert set(sd) == {"count", "mean", "m2"}
    other = RunningMeanStd(2, eps=1e-3)
    other.load_state_dict(sd)
    torch.testing.assert_close(other.mean, rms.mean)
    rms.update(torch.empty(0, 2))  # no-op
    assert rms.count.item() == 2


# --------------------------------------------------------------------------- RBFEncoder


def _gauss(x, mu, h):
    return torch.exp(-0.5 * ((x - mu) / h) ** 2)


def test_rbf_init_and_shape():
    enc = RBFEncoder(3)
    assert enc.out_features == 60
    torch.testing.assert_close(enc.centres[1], torch.linspace(-1, 1, 20))
    torch.testing.assert_close(enc.bandwidth, torch.full((3, 20), 2 / 19))
    out = enc(torch.zeros(4, 5, 3))
    assert out.shape == (4, 5, 60)
    with pytest.raises(ValueError):
        enc(torch.zeros(2, 4))


@pytest.mark.parametrize("x", [-1.0 + 2 / 19 * 4, (-1.0 + 2 / 19 * 7 + -1.0 + 2 / 19 * 8) / 2, 0.3, -1.0, 1.0])
def test_rbf_exact_values_inside(x):
    enc = RBFEncoder(1)
    mu, h = torch.linspace(-1, 1, 20), 2 / 19
    phi = _gauss(torch.tensor(x), mu, h)
    expected = phi / phi.sum()
    torch.testing.assert_close(enc(torch.tensor([[x]]))[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x,side", [(-1.5, "left"), (-7.0, "left"), (2.25, "right")])
def test_rbf_exact_values_outside_with_leak(x, side):
    leak = 0.5
    enc = RBFEncoder(1, leak=leak)
    mu, h = torch.linspace(-1, 1, 20), 2 / 19
    if side == "left":
        phi = _gauss(mu[0], mu, h)  # inner tiles frozen at mu_1
        phi[0] = 1 + leak * (mu[0] - x) / h
    else:
        phi = _gauss(mu[-1], mu, h)
        phi[-1] = 1 + leak * (x - mu[-1]) / h
    expected = phi / phi.sum()
    out = enc(torch.tensor([[x]]))[0]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_rbf_sums_to_one_per_dim_and_in_unit_interval():
    enc = RBFEncoder(4)
    x = torch.randn(64, 4) * 30
    out = enc(x).view(64, 4, 20)
    torch.testing.assert_close(out.sum(-1), torch.ones(64, 4))
    assert (out >= 0).all() and (out <= 1).all()


def test_rbf_boundary_share_grows_monotonically_outside():
    enc = RBFEncoder(1)
    xs = torch.cat([torch.linspace(-1.0, -10.0, 50), torch.tensor([-30.0, -100.0])])
    left = enc(xs.unsqueeze(-1))[:, 0]
    assert (left.diff() > 0).all()
    assert left[-1] < 1
    right = enc((-xs).unsqueeze(-1))[:, -1]
    assert (right.diff() > 0).all()
    torch.testing.assert_close(left, right)  # symmetric initialization


@pytest.mark.parametrize("x0", [-100.0, 100.0, -3.0, 0.37])
def test_rbf_gradients_finite_and_nonzero(x0):
    torch.manual_seed(0)
    enc = RBFEncoder(2)
    x = torch.tensor([[x0, -x0]], requires_grad=True)
    out = enc(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.view(2, 20).sum(-1), torch.ones(2))
    # A non-uniform weighting: the plain sum of outputs is constant (= D).
    w = torch.randn_like(out)
    (out * w).sum().backward()
    for g in (x.grad, enc.centres.grad, enc.raw_bandwidth.grad):
        assert torch.isfinite(g).all()
    assert (x.grad != 0).all()
    assert (enc.centres.grad != 0).any() and (enc.raw_bandwidth.grad != 0).any()
    # Outside the span the boundary tile's own centre and bandwidth are trained.
    if abs(x0) > 1:
        assert enc.centres.grad[0, 0 if x0 < 0 else -1] != 0
        assert enc.raw_bandwidth.grad[0, 0 if x0 < 0 else -1] != 0


def test_rbf_numerically_safe_with_tiny_bandwidths():
    enc = RBFEncoder(1)
    with torch.no_grad():
        enc.raw_bandwidth.fill_(-50.0)  # h -> min_bandwidth
    x = torch.tensor([[-1 + 1 / 19], [1e6], [-1e6]], requires_grad=True)
    out = enc(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(3))
    (out * torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert math.isfinite(enc.centres.grad.abs().sum().item())
