"""ClippedAdamW (``sun_lightning/optim``) against torch's ``clip_grad_norm_`` followed by ``torch.optim.AdamW``."""

from __future__ import annotations

import copy

import pytest
import torch

from sun_lightning.optim import ClippedAdamW

SHAPES = [(64, 72), (64,), (256, 192), (16, 64), (16,)]


def twins(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    ours = [torch.nn.Parameter(torch.randn(s, dtype=dtype)) for s in SHAPES]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    return ours, ref


def run(ours, ref, opt, ref_opt, steps, clip, scale_of=lambda it: 3.0 if it % 2 else 0.05, grad_of=None):
    g = torch.Generator().manual_seed(1)
    for it in range(steps):
        for p, r in zip(ours, ref):
            grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * scale_of(it)
            p.grad, r.grad = grad.clone(), grad.clone()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref, clip)
        opt.step()
        ref_opt.step()


@pytest.mark.parametrize("clip", [1.0, None])
def test_steps_match_clip_then_adamw(clip):
    ours, ref = twins()
    opt = ClippedAdamW(ours, lr=1e-3, weight_decay=0.01, max_grad_norm=clip)
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.01)
    run(ours, ref, opt, ref_opt, 40, clip)  # torch's lerp_ may round through a fused multiply-add: ulps apart
    for p, r in zip(ours, ref):
        assert not torch.equal(p, torch.zeros_like(p))
        torch.testing.assert_close(p, r, rtol=0, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(opt.state[p][key], ref_opt.state[r][key], rtol=1e-5, atol=1e-6)
    # the clip did bite: half the steps had a gradient norm far above 1
    assert clip is None or max(float(p.grad.norm()) for p in ours) > 1.0


def test_clip_bites_exactly_as_clip_grad_norm():
    # One step from zero moments: AdamW's first step is sign-like, so compare the moments instead.
    ours, ref = twins()
    opt = ClippedAdamW(ours, lr=1e-3, weight_decay=0.0, max_grad_norm=0.5)
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.0)
    run(ours, ref, opt, ref_opt, 1, 0.5, scale_of=lambda it: 10.0)
    total = torch.sqrt(sum(opt.state[p]["exp_avg"].square().sum() for p in ours)) / 0.1  # m = 0.1 g after one step
    torch.testing.assert_close(total, torch.tensor(0.5), rtol=1e-4, atol=0)


def test_float64_takes_torchs_path_with_the_same_result():
    ours, ref = twins(torch.float64)
    opt = ClippedAdamW(ours, lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    run(ours, ref, opt, ref_opt, 10, 1.0)
    for p, r in zip(ours, ref):
        torch.testing.assert_close(p, r, rtol=0, atol=1e-12)


def test_state_loads_from_and_into_torch_adamw():
    ours, ref = twins()
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.01)
    opt = ClippedAdamW(ours, lr=1e-3, weight_decay=0.01)
    run(ours, ref, opt, ref_opt, 5, None)
    # continue both from torch's state: same trajectory
    opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))  # (loading shares the tensors otherwise)
    for p, r in zip(ours, ref):
        p.data.copy_(r.data)
    run(ours, ref, opt, ref_opt, 5, None)
    for p, r in zip(ours, ref):
        torch.testing.assert_close(p, r, rtol=0, atol=1e-6)
    torch.optim.AdamW(ref, lr=1e-3).load_state_dict(opt.state_dict())


def test_parameters_without_gradient_are_left_alone():
    ours, _ = twins()
    opt = ClippedAdamW(ours, max_grad_norm=1.0)
    before = ours[1].detach().clone()
    for p in ours:
        p.grad = None if p is ours[1] else torch.ones_like(p)
    opt.step()
    assert torch.equal(ours[1], before) and ours[1] not in opt.state
    assert not torch.equal(ours[0], torch.zeros_like(ours[0]))


def test_bad_clip_is_an_error():
    with pytest.raises(ValueError, match="max_grad_norm must be positive"):
        ClippedAdamW([torch.nn.Parameter(torch.zeros(3))], max_grad_norm=0.0)


@pytest.mark.parametrize("clip", [1.0, None])
def test_polyak_step_inside_the_step_equals_one_after_it(clip):
    from sun_lightning.optim import polyak_

    ours, ref = twins()
    targets = [torch.randn_like(p) for p in ours]
    ref_targets = [t.clone() for t in targets]
    opt = ClippedAdamW(ours, lr=1e-3, weight_decay=0.01, max_grad_norm=clip, polyak=(targets, 0.01))
    ref_opt = ClippedAdamW(ref, lr=1e-3, weight_decay=0.01, max_grad_norm=clip)
    g = torch.Generator().manual_seed(2)
    for _ in range(5):
        for p, r in zip(ours, ref):
            p.grad = torch.randn(p.shape, generator=g)
            r.grad = p.grad.clone()
        ours[1].grad = ref[1].grad = None  # a parameter without a gradient leaves its target alone
        opt.step()
        ref_opt.step()
        polyak_([t for i, t in enumerate(ref_targets) if i != 1], [r for i, r in enumerate(ref) if i != 1], 0.01)
    for t, r in zip(targets, ref_targets):
        torch.testing.assert_close(t, r, rtol=0, atol=1e-7)
    assert not torch.equal(targets[0], ref_targets[0] * 0)


def test_polyak_targets_must_match_the_parameters():
    ours, _ = twins()
    with pytest.raises(ValueError, match="one target of its parameter's shape"):
        ClippedAdamW(ours, polyak=([torch.zeros(3)], 0.01))
    with pytest.raises(ValueError, match="tau must be in"):
        ClippedAdamW(ours, polyak=([torch.zeros_like(p) for p in ours], 1.5))
