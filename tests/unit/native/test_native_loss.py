"""The DQN variant's loss and its gradient in one C call (``native/q_loss.py``, ``backend="native"``) against
the torch path (``backend="torch"``: ``td_targets`` + ``F.huber_loss``): loss, statistics and every gradient.
Dropout is off: the kernel draws its own mask stream."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import sun_lightning.envs  # noqa: F401
from sun_lightning import keys
from sun_lightning.learners.dqn import TRAIN_STATS, DQNSVF
from sun_lightning.native import q_loss as native_loss
from sun_lightning.envs.registry import goal_space

FOUR_ROOM = goal_space("sun_lightning/FourRoomStuck-v0")
MOUNTAIN_CAR = goal_space("sun_lightning/MountainCar-v0")


def random_batch(space, n: int, t: int, seed: int, states: int = 40, goals: int = 30) -> TensorDict:
    """Tables of random inputs and [n, t] rows indexing them, with random rewards and episode ends."""
    g = torch.Generator().manual_seed(seed)
    if space.exact_counts:  # one-hot tiles, as the gridworlds store them
        state_table = torch.eye(space.obs_dim)[torch.randint(space.obs_dim, (states,), generator=g)]
        goal_table = torch.eye(space.goal_dim)[torch.randint(space.goal_dim, (goals,), generator=g)]
    else:
        state_table, goal_table = torch.randn(states, space.obs_dim, generator=g), torch.randn(goals, space.goal_dim, generator=g)
    a = space.num_actions
    return TensorDict({
        keys.STATES: state_table,
        keys.GOALS: goal_table,
        keys.STATE_INDEX: torch.randint(states, (n, t), generator=g),
        keys.NEXT_STATE_INDEX: torch.randint(states, (n, t), generator=g),
        keys.GOAL_INDEX: torch.randint(goals, (n, t), generator=g),
        keys.ACTION: torch.randint(a, (n, t), generator=g),
        keys.GOAL_ACTION: torch.randint(a, (n, t), generator=g),
        keys.REWARD: (torch.rand(n, t, generator=g) < 0.2).float(),
        keys.TERMINATED: torch.rand(n, t, generator=g) < 0.05,
        keys.EPISODE_END: torch.rand(n, t, generator=g) < 0.15,
    }, batch_size=[])


def learner(space, seed: int, **kwargs) -> DQNSVF:
    torch.manual_seed(seed)
    module = DQNSVF(space, init_std=0.3, dropout=0.0, **kwargs)
    with torch.no_grad():  # a target network apart from the online one: Double DQN's split matters
        for p in module.q_target.parameters():
            p.add_(0.2 * torch.randn_like(p))
    if module.obs_stats is not None:  # RBF encoders: standardize with the tables' statistics
        module.observe(torch.randn(500, space.obs_dim))
    return module


def loss_and_grads(module: DQNSVF, batch: TensorDict, fused: bool, seed: int, scale: float = 1.0):
    module.zero_grad(set_to_none=True)
    module.hparams.backend = "native" if fused else "torch"
    loss, stats = module.loss_and_stats(batch)
    (loss * scale).backward()
    return loss.detach(), stats, {name: p.grad.clone() for name, p in module.q.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("space", [FOUR_ROOM, MOUNTAIN_CAR], ids=["one-hot", "rbf"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fused_loss_matches_td_targets_and_huber(space, seed):
    module = learner(space, seed)
    batch = random_batch(space, 12, 9, seed)
    loss, stats, grads = loss_and_grads(module, batch, True, seed)
    ref_loss, ref_stats, ref_grads = loss_and_grads(module, batch, False, seed)
    assert loss.dim() == 0 and stats.shape == (len(TRAIN_STATS),) and not stats.requires_grad
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(stats, ref_stats, rtol=1e-5, atol=1e-7)
    assert 0.0 < float(stats[3]) < 1.0  # some traces continue, some are cut: both branches ran
    assert grads.keys() == ref_grads.keys()
    if not space.exact_counts:  # the RBF encoders' centres and bandwidths learn through the tables
        assert any(name.startswith(("obs_encoder", "goal_encoder")) for name in grads)
    for name, g in ref_grads.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-5 * float(g.abs().max()), msg=name)  # two float32 orders


def test_gradient_scales_with_the_output_gradient():
    module = learner(FOUR_ROOM, 0)
    batch = random_batch(FOUR_ROOM, 8, 16, 3)
    _, _, one = loss_and_grads(module, batch, True, 0)
    _, _, three = loss_and_grads(module, batch, True, 0, scale=3.0)
    for name, g in one.items():  # equal but for rounding (sums with cancellation): within 1e-6 of the largest entry
        torch.testing.assert_close(three[name], 3.0 * g, rtol=1e-5, atol=3e-6 * float(g.abs().max()))


def test_huber_branches_and_no_bootstrap_clip():
    # A tiny δ puts every error beyond it (the linear branch); no clip lets bootstraps above 1 through.
    for kwargs in ({"huber_delta": 1e-4}, {"bootstrap_clip": None}):
        module = learner(FOUR_ROOM, 1, **kwargs)
        with torch.no_grad():
            module.q_target.head[-1].bias.fill_(2.0)  # bootstraps of 2: clipped to 1 unless the clip is off
        batch = random_batch(FOUR_ROOM, 6, 8, 2)
        loss, stats, grads = loss_and_grads(module, batch, True, 0)
        ref_loss, ref_stats, ref_grads = loss_and_grads(module, batch, False, 0)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(stats, ref_stats, rtol=1e-5, atol=1e-7)
        for name, g in ref_grads.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-5 * float(g.abs().max()), msg=name)  # two float32 orders
        if "bootstrap_clip" in kwargs:
            assert float(stats[2]) > 1.0  # mean target above 1: the bootstrap was not clipped


def test_without_grad_it_only_evaluates():
    module = learner(FOUR_ROOM, 0)
    batch = random_batch(FOUR_ROOM, 6, 8, 1)
    module.hparams.backend = "native"
    with torch.no_grad():
        loss, stats = module.loss_and_stats(batch)
    module.hparams.backend = "torch"
    ref, _ = module.loss_and_stats(batch)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(stats[0], loss)


def test_bad_batches_are_errors():
    module = learner(FOUR_ROOM, 0, backend="native")
    batch = random_batch(FOUR_ROOM, 4, 5, 0)
    batch[keys.ACTION][1, 2] = 4
    with pytest.raises(IndexError, match="an action is outside"):
        module.loss_and_stats(batch)
    batch = random_batch(FOUR_ROOM, 4, 5, 0)
    batch[keys.GOAL_INDEX][0, 0] = 30  # the goal table has 30 rows
    with pytest.raises(IndexError, match="row index"):
        module.loss_and_stats(batch)


def test_auto_picks_the_kernel_on_cpu_and_torch_without_a_compiler(monkeypatch):
    module = learner(FOUR_ROOM, 0)
    batch = random_batch(FOUR_ROOM, 4, 5, 0)
    assert module.hparams.backend == "auto" and module._native(batch)
    assert module.loss_and_stats(batch)[0].grad_fn.name() == "_QLossBackward"
    monkeypatch.setattr(native_loss, "available", lambda: False)  # no C compiler: the torch path
    assert not module._native(batch)
    assert module.loss_and_stats(batch)[0].grad_fn.name() == "HuberLossBackward0"
    with pytest.raises(ValueError, match="backend"):
        DQNSVF(FOUR_ROOM, backend="cuda")


@pytest.mark.parametrize("space", [FOUR_ROOM, MOUNTAIN_CAR], ids=["one-hot", "rbf"])
def test_the_ensemble_runs_each_member_through_the_kernel_on_its_own_batch_and_drawn_target(space):
    """EnsembleDQNSVF on the CPU: member e's loss is the single critic's kernel on member e's batch, with member e's
    weights and target network ``drawn[e]``'s (dropout on: the same seeds drawn in the same order), the loss their sum,
    each member's gradient its own loss's; a member given another member's batch or target does not match."""
    import copy

    from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF

    e = 4
    torch.manual_seed(0)
    module = EnsembleDQNSVF(space, init_std=0.3)
    with torch.no_grad():
        for p in module.q_target.parameters():  # target networks apart from their members
            p.add_(0.2 * torch.randn_like(p))
    if module.obs_stats is not None:
        module.observe(torch.randn(500, space.obs_dim))
    batch = torch.stack([random_batch(space, 12, 9, seed) for seed in range(e)])

    def member(m: int, target: bool = False):
        """Member m (or target network m) as a stand-alone network."""
        net = copy.deepcopy(module.q_target if target else module.q)
        for name, p in list(net.named_parameters()):
            owner, _, attr = name.rpartition(".")
            setattr(net.get_submodule(owner), attr, torch.nn.Parameter(p.detach()[m].clone(), requires_grad=not target))
        return net

    torch.manual_seed(5)
    drawn = module.draw_target_index()
    assert len(set(drawn.tolist())) > 1 or drawn[0] != 0  # not every member its own target by chance
    torch.manual_seed(5)
    loss, stats = module.loss_and_stats(batch)
    loss.backward()
    hp = module.hparams
    refs = []
    torch.manual_seed(5)
    module.draw_target_index()  # the same stream: the kernels' dropout seeds follow the draw
    for m in range(e):
        net = member(m)
        ref, ref_stats = native_loss.q_loss(net, member(int(drawn[m]), target=True), batch[m], hp.gamma, hp.lam,
                                            hp.bootstrap_clip, 1.0 - hp.gamma, hp.huber_delta)
        ref.backward()
        refs.append((ref.detach(), ref_stats, {n: p.grad for n, p in net.named_parameters() if p.grad is not None}))
    assert torch.equal(loss.detach(), sum(r[0] for r in refs))
    def same(got: torch.Tensor, want: torch.Tensor) -> None:
        if space.exact_counts:  # identity encoders: the very same arithmetic
            assert torch.equal(got, want)
        else:  # the members' RBF encoders run vmapped: another rounding of the tables' last bits
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * float(want.abs().max()))

    same(loss.detach(), sum(r[0] for r in refs))
    same(stats, torch.stack([r[1] for r in refs]).mean(0))
    grads = {name: p.grad for name, p in module.q.named_parameters() if p.grad is not None}
    assert grads.keys() == refs[0][2].keys()
    if not space.exact_counts:
        assert any(name.startswith(("obs_encoder", "goal_encoder")) for name in grads)
    for name, g in grads.items():
        for m in range(e):
            same(g[m], refs[m][2][name])
    # another member's batch or another target network gives another loss
    swapped = native_loss.q_loss(member(0), member(int(drawn[0]), target=True), batch[1], hp.gamma, hp.lam,
                                 hp.bootstrap_clip, 1.0 - hp.gamma, hp.huber_delta)[0]
    other = native_loss.q_loss(member(0), member((int(drawn[0]) + 1) % e, target=True), batch[0], hp.gamma, hp.lam,
                               hp.bootstrap_clip, 1.0 - hp.gamma, hp.huber_delta)[0]
    assert not torch.isclose(swapped, refs[0][0]) and not torch.isclose(other, refs[0][0])
