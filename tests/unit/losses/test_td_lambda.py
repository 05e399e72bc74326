"""Tests for the TD(λ) / Watkins targets of SPEC §5a.

The vectorised backward recursion is checked against an independent
forward-view reference written with plain Python floats and loops.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from sun_lightning.losses.td_lambda import (
    double_q_bootstrap,
    greedy_within,
    watkins_lambda_returns,
)


# --------------------------------------------------------------------------
# Forward-view reference (plain floats, explicit loops)
# --------------------------------------------------------------------------
def _forward_view_row(r, d, B, c, gamma, lam):
    """λ-return of one row by the forward view.

    G^λ_t = Σ_{n<m} (1-λ) λ^{n-1} G^{(n)}_t + λ^{m-1} G^{(m)}_t, where the
    chain from t stops after step t+m-1, the first step that is done, cut
    (c = 0) or the last of the sequence. G^{(n)}_t sums n discounted rewards
    and bootstraps γ^n B_{t+n-1} unless step t+n-1 is done.
    """
    T = len(r)
    out = []
    for t in range(T):
        # Length m of the chain starting at t.
        m = 1
        j = t
        while True:
            if d[j] or j == T - 1 or not c[j]:
                break
            j += 1
            m += 1
        total = 0.0
        for n in range(1, m + 1):
            ret = 0.0
            for i in range(n):
                ret += gamma**i * r[t + i]
            last = t + n - 1
            if not d[last]:
                ret += gamma**n * B[last]
            w = (1 - lam) * lam ** (n - 1) if n < m else lam ** (m - 1)
            total += w * ret
        out.append(total)
    return out


def _forward_view(rewards, dones, bootstrap, cont, gamma, lam):
    lead = rewards.shape[:-1]
    T = rewards.shape[-1]
    r2 = rewards.reshape(-1, T).tolist()
    d2 = dones.reshape(-1, T).bool().tolist()
    b2 = bootstrap.reshape(-1, T).tolist()
    c2 = cont.reshape(-1, T).bool().tolist()
    rows = [
        _forward_view_row(r2[i], d2[i], b2[i], c2[i], gamma, lam)
        for i in range(len(r2))
    ]
    return torch.tensor(rows, dtype=torch.float64).reshape(*lead, T)


def _random_inputs(shape, g, p_done, p_cont):
    rewards = (torch.rand(shape, generator=g) < 0.3).double() * torch.rand(
        shape, generator=g, dtype=torch.float64
    )
    dones = torch.rand(shape, generator=g) < p_done
    bootstrap = torch.rand(shape, generator=g, dtype=torch.float64) * 1.2 - 0.1
    cont = torch.rand(shape, generator=g) < p_cont
    return rewards, dones, bootstrap, cont


# --------------------------------------------------------------------------
# watkins_lambda_returns
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape",
    [(1,), (5,), (3, 1), (4, 7), (2, 3, 6), (16,), (6, 16)],
)
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.5), (0.7, 0.0), (0.8, 1.0)])
def test_matches_forward_view_random(shape, gamma, lam):
    g = torch.Generator().manual_seed(hash((shape, gamma, lam)) % 2**31)
    for p_done, p_cont in [(0.0, 1.0), (0.15, 0.8), (0.5, 0.5), (0.0, 0.0)]:
        r, d, B, c = _random_inputs(shape, g, p_done, p_cont)
        got = watkins_lambda_returns(r, d, B, c, gamma, lam)
        want = _forward_view(r, d, B, c, gamma, lam)
        assert got.shape == r.shape
        assert_close(got, want)


def test_hand_computed_T3():
    # γ = 0.5, λ = 0.5, no dones, trace continues everywhere.
    r = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
    B = torch.tensor([0.4, 0.8, 0.2], dtype=torch.float64)
    d = torch.zeros(3, dtype=torch.bool)
    c = torch.ones(3, dtype=torch.bool)
    # G_2 = 2 + 0.5 * 0.2 = 2.1
    # G_1 = 0 + 0.5 * (0.5 * 0.8 + 0.5 * 2.1) = 0.725
    # G_0 = 1 + 0.5 * (0.5 * 0.4 + 0.5 * 0.725) = 1.28125
    got = watkins_lambda_returns(r, d, B, c, 0.5, 0.5)
    assert_close(got, torch.tensor([1.28125, 0.725, 2.1], dtype=torch.float64))


def test_hand_computed_cut_and_done():
    r = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    B = torch.tensor([0.3, 0.6, 0.9, 0.5], dtype=torch.float64)
    d = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    c = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    # G_3 = 0 + 0.5 * 0.5 = 0.25 (last step, bootstraps)
    # G_2 = 1 (done: no bootstrap, and nothing flows back from G_3)
    # G_1 = 0 + 0.5 * (0.5 * 0.6 + 0.5 * 1) = 0.4
    # G_0 = 0 + 0.5 * 0.3 = 0.15 (cut: one-step target)
    got = watkins_lambda_returns(r, d, B, c, 0.5, 0.5)
    assert_close(got, torch.tensor([0.15, 0.4, 1.0, 0.25], dtype=torch.float64))


def test_lambda_zero_is_one_step_q_learning():
    g = torch.Generator().manual_seed(0)
    r, d, B, c = _random_inputs((5, 9), g, 0.2, 0.9)
    got = watkins_lambda_returns(r, d, B, c, 0.9, 0.0)
    want = r + 0.9 * (~d).double() * B
    assert_close(got, want)


def test_lambda_one_no_cuts_is_mc_plus_bootstrap():
    g = torch.Generator().manual_seed(1)
    T = 6
    r = torch.rand(3, T, generator=g, dtype=torch.float64)
    B = torch.rand(3, T, generator=g, dtype=torch.float64)
    d = torch.zeros(3, T)
    c = torch.ones(3, T)
    gamma = 0.9
    got = watkins_lambda_returns(r, d, B, c, gamma, 1.0)
    for t in range(T):
        n = T - t
        disc = gamma ** torch.arange(n, dtype=torch.float64)
        want = (r[:, t:] * disc).sum(-1) + gamma**n * B[:, -1]
        assert_close(got[:, t], want)


def test_done_in_middle_stops_bootstrapping():
    T = 5
    r = torch.zeros(T)
    r[2] = 1.0
    d = torch.zeros(T, dtype=torch.bool)
    d[2] = True
    B = torch.full((T,), 100.0)  # huge: any leak past the done would show
    c = torch.ones(T, dtype=torch.bool)
    gamma, lam = 0.9, 1.0
    got = watkins_lambda_returns(r, d, B, c, gamma, lam)
    assert_close(got[:3], torch.tensor([gamma**2, gamma, 1.0]))
    # Before the done nothing depends on B: changing it changes nothing.
    got2 = watkins_lambda_returns(r, d, B * 0, c, gamma, lam)
    assert_close(got[:3], got2[:3])


def test_last_cont_ignored_and_inputs_untouched():
    r = torch.tensor([0.0, 0.0])
    d = torch.zeros(2)
    B = torch.tensor([0.5, 0.7])
    c1 = torch.tensor([1.0, 1.0])
    c0 = torch.tensor([1.0, 0.0])
    g1 = watkins_lambda_returns(r, d, B, c1, 0.9, 0.8)
    g0 = watkins_lambda_returns(r, d, B, c0, 0.9, 0.8)
    assert_close(g1, g0)
    assert_close(g1[1], torch.tensor(0.9 * 0.7))
    assert torch.equal(c1, torch.tensor([1.0, 1.0]))


def test_dtype_and_no_grad_inputs():
    g = torch.Generator().manual_seed(2)
    r, d, B, c = _random_inputs((4, 5), g, 0.2, 0.7)
    out32 = watkins_lambda_returns(r.float(), d, B.float(), c, 0.99, 0.95)
    assert out32.dtype == torch.float32
    assert not out32.requires_grad
    assert_close(out32.double(), _forward_view(r, d, B, c, 0.99, 0.95), atol=1e-5, rtol=1e-5)
    # Gradients flow to the bootstrap if the caller ever wants them.
    Bg = B.clone().requires_grad_(True)
    watkins_lambda_returns(r, d, Bg, c, 0.99, 0.95).sum().backward()
    assert Bg.grad is not None


# --------------------------------------------------------------------------
# greedy_within
# --------------------------------------------------------------------------
def test_greedy_within_tolerance_boundary():
    q = torch.tensor([[0.5, 0.495, 0.48]]).expand(3, 3)
    a = torch.tensor([0, 1, 2])
    assert greedy_within(q, a, 0.01).tolist() == [True, True, False]
    assert greedy_within(q, a, 0.0).tolist() == [True, False, False]
    assert greedy_within(q, a, 0.03).tolist() == [True, True, True]


def test_greedy_within_exact_boundary_is_greedy():
    # Values exactly representable, so q[a] == max - tol exactly.
    q = torch.tensor([1.0, 0.75], dtype=torch.float64)
    assert greedy_within(q, torch.tensor(1), 0.25).item()
    assert not greedy_within(q, torch.tensor(1), 0.125).item()


def test_greedy_within_ties_and_batch_dims():
    q = torch.tensor([[[0.3, 0.7, 0.7, 0.1]], [[0.2, 0.2, 0.2, 0.2]]])
    a = torch.tensor([[1], [3]])
    assert greedy_within(q, a, 0.0).tolist() == [[True], [True]]
    a = torch.tensor([[2], [0]])
    assert greedy_within(q, a, 0.0).tolist() == [[True], [True]]
    a = torch.tensor([[0], [0]])
    assert greedy_within(q, a, 0.0).tolist() == [[False], [True]]


# --------------------------------------------------------------------------
# double_q_bootstrap
# --------------------------------------------------------------------------
def test_double_q_uses_online_argmax_target_value():
    q_online = torch.tensor([[0.1, 0.9, 0.3], [0.8, 0.2, 0.1]])
    q_target = torch.tensor([[0.7, 0.2, 0.95], [0.4, 0.6, 0.5]])
    got = double_q_bootstrap(q_online, q_target)
    # Not max(q_target) = [0.95, 0.6]: the online net picks the action.
    assert_close(got, torch.tensor([0.2, 0.4]))


def test_double_q_clip():
    q_online = torch.tensor([0.0, 1.0])
    q_target = torch.tensor([0.5, 1.3])
    assert_close(double_q_bootstrap(q_online, q_target), torch.tensor(1.0))
    assert_close(double_q_bootstrap(q_online, q_target, clip=None), torch.tensor(1.3))
    assert_close(double_q_bootstrap(q_online, q_target, clip=1.2), torch.tensor(1.2))
    # Only an upper clip: negatives pass through.
    assert_close(double_q_bootstrap(q_online, -q_target), torch.tensor(-1.3))


def test_double_q_shapes():
    g = torch.Generator().manual_seed(3)
    qo = torch.rand(2, 3, 5, generator=g)
    qt = torch.rand(2, 3, 5, generator=g)
    out = double_q_bootstrap(qo, qt)
    assert out.shape == (2, 3)
    want = qt.gather(-1, qo.argmax(-1, keepdim=True)).squeeze(-1)
    assert_close(out, want)
