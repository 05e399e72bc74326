"""Target-network updates (``learners/target.py``) and the DQN learner's optimizer step, against plain loops."""

from __future__ import annotations

import math

import pytest
import torch

from sun_lightning.learners.target import TargetUpdate


def nets(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    online = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    target = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    return online, target.requires_grad_(False)


@pytest.mark.parametrize("tau, every", [(0.001, 1), (0.005, 2), (5e-7, 2), (1.0, 3)])
def test_polyak_steps_on_every_kth_call_by_tau(tau, every):
    online, target = nets()
    update = TargetUpdate(online, target, tau, every)
    expected = [t.detach().double().clone() for t in target.parameters()]
    for call in range(1, 8):
        with torch.no_grad():  # the online network moves between calls, as after optimizer steps
            for p in online.parameters():
                p.add_(0.1 * torch.randn_like(p))
        moved = update()
        assert moved == (call % every == 0)
        if moved:
            expected = [e + tau * (p.detach().double() - e) for e, p in zip(expected, online.parameters())]
        for e, t in zip(expected, target.parameters()):
            torch.testing.assert_close(t.double(), e, rtol=1e-6, atol=1e-7)
        if moved and tau == 1.0:  # a hard copy
            assert all(torch.equal(t, p) for t, p in zip(target.parameters(), online.parameters()))
    assert update.state_dict() == {"calls": 7}


def test_two_rates_for_two_networks_after_k_updates():
    # Two Polyak updates side by side, τ = 0.005 and 5e-7, both every 2 updates: count and inspect.
    # float64: a step of 5e-7 of the gap is below float32's resolution at these weights' size.
    critic, critic_target = (n.double() for n in nets(0))
    actor, actor_target = (n.double() for n in nets(1))
    updates = (TargetUpdate(critic, critic_target, 0.005, every=2), TargetUpdate(actor, actor_target, 5e-7, every=2))
    c0 = [t.clone() for t in critic_target.parameters()]
    a0 = [t.clone() for t in actor_target.parameters()]
    gaps_c = [p.detach() - t for p, t in zip(critic.parameters(), c0)]
    gaps_a = [p.detach() - t for p, t in zip(actor.parameters(), a0)]
    assert [u() for u in updates] == [False, False]  # first call: not due
    assert all(torch.equal(t, t0) for t, t0 in zip(critic_target.parameters(), c0))
    assert [u() for u in updates] == [True, True]
    for t, t0, g in zip(critic_target.parameters(), c0, gaps_c):
        torch.testing.assert_close(t - t0, 0.005 * g, rtol=1e-8, atol=1e-15)
    for t, t0, g in zip(actor_target.parameters(), a0, gaps_a):
        torch.testing.assert_close(t - t0, 5e-7 * g, rtol=1e-6, atol=1e-15)


def test_mismatched_networks_and_bad_rates_are_errors():
    online, _ = nets()
    with pytest.raises(ValueError, match="match"):
        TargetUpdate(online, torch.nn.Linear(5, 7), 0.01)
    with pytest.raises(ValueError, match="tau"):
        TargetUpdate(online, nets()[1], 0.0)
    with pytest.raises(ValueError, match="every"):
        TargetUpdate(online, nets()[1], 0.1, every=0)


def reference_step(params, grads, state, lr, wd, clip, betas=(0.9, 0.999), eps=1e-8):
    """clip_grad_norm_ then AdamW, one element at a time in float64 (torch.optim.AdamW's documented algorithm)."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    coef = min(1.0, clip / (norm + 1e-6))
    state["t"] += 1
    t = state["t"]
    out = []
    for i, (p, g) in enumerate(zip(params, grads)):
        p, g = p.double().flatten().tolist(), (g.double() * coef).flatten().tolist()
        m, v = state.setdefault(("m", i), [0.0] * len(p)), state.setdefault(("v", i), [0.0] * len(p))
        new = []
        for j in range(len(p)):
            x = p[j] * (1 - lr * wd)
            m[j] = betas[0] * m[j] + (1 - betas[0]) * g[j]
            v[j] = betas[1] * v[j] + (1 - betas[1]) * g[j] ** 2
            m_hat, v_hat = m[j] / (1 - betas[0] ** t), v[j] / (1 - betas[1] ** t)
            new.append(x - lr * m_hat / (math.sqrt(v_hat) + eps))
        out.append(torch.tensor(new, dtype=torch.float64))
    return out


def test_the_dqn_update_is_clip_then_adamw_then_polyak():
    """DQNSVF.update's three steps (``clip_gradients``, ``torch.optim.AdamW``, :class:`TargetUpdate`)
    give the numbers of a plain float64 loop over the same gradients."""
    online, target = nets(3)
    opt = torch.optim.AdamW(online.parameters(), lr=1e-2, weight_decay=0.01, foreach=True)
    update = TargetUpdate(online, target, 0.001)
    ref = [p.detach().double().flatten().clone() for p in online.parameters()]
    ref_target = [t.detach().double().flatten().clone() for t in target.parameters()]
    state = {"t": 0}
    for step in range(4):
        x = torch.randn(16, 5) * (10.0 if step % 2 else 0.1)  # a large gradient (clipped) then a small one
        online.zero_grad()
        online(x).square().mean().backward()
        grads = [p.grad.clone() for p in online.parameters()]
        torch.nn.utils.clip_grad_norm_(online.parameters(), 1.0)
        opt.step()
        update()
        ref = reference_step(ref, grads, state, 1e-2, 0.01, 1.0)
        ref_target = [t + 0.001 * (r - t) for t, r in zip(ref_target, ref)]
        for p, r in zip(online.parameters(), ref):
            torch.testing.assert_close(p.detach().double().flatten(), r, rtol=1e-5, atol=1e-6)
        for t, r in zip(target.parameters(), ref_target):
            torch.testing.assert_close(t.double().flatten(), r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tau", [0.005, 1.0])
def test_follow_step_is_the_pre_step_weights_moved_tau_towards_the_post_step_ones(tau):
    from sun_lightning.learners.target import FollowStep

    online, target = nets()
    follow = FollowStep(online, target, tau)
    opt = torch.optim.SGD(online.parameters(), lr=0.1)
    for step in range(3):
        pre = [p.detach().clone() for p in online.parameters()]
        online(torch.randn(4, 5)).square().sum().backward()
        follow.before()
        opt.step()
        opt.zero_grad()
        follow.after()
        for t, a, b in zip(target.parameters(), pre, online.parameters()):
            assert torch.equal(t, torch.lerp(a, b.detach(), tau))  # no memory of the earlier steps
    if tau == 1.0:
        assert all(torch.equal(t, p) for t, p in zip(target.parameters(), online.parameters()))
    with pytest.raises(ValueError, match="tau"):
        FollowStep(online, target, 0.0)
