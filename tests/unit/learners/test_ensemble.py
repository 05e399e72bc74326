"""The critic ensemble of AdaGoal / DISCOVER (SPEC §5a "Ensemble baselines"), member by member against single critics."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers import THREE_ROOM, filled_replay, goal_env
from sun_lightning import keys
from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF
from sun_lightning.envs.registry import goal_space
from sun_lightning.goals.ensemble import DISCOVER
from sun_lightning.networks.q_network import GoalQNetwork
from test_dqn import SPACE, consistent_batch

E = 4


def member_net(module: EnsembleDQNSVF, e: int, target: bool = False) -> GoalQNetwork:
    """Member e (or its target network) as a stand-alone GoalQNetwork, encoders and their statistics included."""
    net = copy.deepcopy(module.q_target if target else module.q)
    for name, p in list(net.named_parameters()):
        owner, _, attr = name.rpartition(".")
        setattr(net.get_submodule(owner), attr, torch.nn.Parameter(p.detach()[e].clone()))
    return net


def stacked(n: int, t: int, seeds) -> torch.Tensor:
    return torch.stack([consistent_batch(n, t, s) for s in seeds])


def update(module: EnsembleDQNSVF, opt, batch) -> None:
    """One step of DQNSVF.update without a Trainer."""
    loss, _ = module.loss(batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    module.clip_gradients(opt, module.hparams.grad_clip, "norm")
    opt.step()
    module.target_update()


def test_members_differ_at_init_and_each_has_its_own_target():
    torch.manual_seed(0)
    module = EnsembleDQNSVF(SPACE)
    assert module.batches_per_update == E and module.hparams.ensemble_size == E
    for (name, p), (_, p_target) in zip(module.q.named_parameters(), module.q_target.named_parameters()):
        assert p.shape[0] == E and p.requires_grad and not p_target.requires_grad
        torch.testing.assert_close(p_target, p.detach())
        if "weight" in name and p.dim() == 3:  # linear weights are random; LayerNorm gains start at 1
            assert all(not torch.equal(p[i], p[j]) for i in range(E) for j in range(i + 1, E))
    with pytest.raises(ValueError, match="ensemble_size"):
        EnsembleDQNSVF(SPACE, ensemble_size=0)


def test_goal_values_per_member_and_pessimistic_acting():
    torch.manual_seed(0)
    module = EnsembleDQNSVF(SPACE, init_std=0.3)
    b, k = 3, 5
    obs, goal = torch.randn(b, SPACE.obs_dim), torch.randn(b, k, SPACE.goal_dim)
    goal_action = torch.randint(4, (b, k))
    values, acting_k = module.goal_values(obs, goal, goal_action)
    assert values.shape == (E, b, k) and acting_k.shape == (b, k, 4)
    singles = []
    for e in range(E):
        net = member_net(module, e)
        q = net(obs.unsqueeze(1).expand(b, k, -1), goal)  # [B, K, A, A]
        expected = q.gather(-1, goal_action[..., None, None].expand(b, k, 4, 1)).squeeze(-1).amax(-1)
        torch.testing.assert_close(values[e], expected)
        singles.append(net(obs, goal[:, 0])[torch.arange(b), :, goal_action[:, 0]])  # [B, A]
    acting = module.action_values(obs, goal[:, 0], goal_action[:, 0])
    torch.testing.assert_close(acting, torch.stack(singles).amin(0))
    torch.testing.assert_close(acting_k[:, 0], acting)


@pytest.mark.parametrize("seed", [0, 1])
def test_td_targets_are_each_members_own_with_a_randomly_drawn_target(seed):
    torch.manual_seed(seed)
    module = EnsembleDQNSVF(SPACE, dropout=0.0, init_std=0.3)
    for p in module.q_target.parameters():  # distinct target networks, so the draw shows
        p.add_(0.3 * torch.randn_like(p))
    batch = stacked(6, 9, [seed, seed + 10, seed + 20, seed + 30])  # different episode ends per member
    torch.manual_seed(seed)
    drawn = module.draw_target_index()
    torch.manual_seed(seed)
    q_taken, target, cont = module.td_targets(batch)
    assert q_taken.shape == target.shape == cont.shape == (E, 6, 9)
    for e in range(E):
        ref = module.td_targets(batch[e], q_fn=member_net(module, e), q_target_fn=member_net(module, int(drawn[e]), target=True))
        for got, want in zip((q_taken[e], target[e], cont[e]), ref):
            torch.testing.assert_close(got, want)
    other = module.td_targets(batch, target_index=(drawn + 1) % E)[1]
    assert all(not torch.allclose(other[e], target[e]) for e in range(E))
    # Uniform and independent per member: over 60 draws every member meets every target network.
    draws = torch.stack([module.draw_target_index() for _ in range(60)])
    assert all(set(draws[:, e].tolist()) == set(range(E)) for e in range(E))
    # The loss is the sum of the members' own means; the statistics their average.
    loss, stats = module.loss(batch)
    torch.testing.assert_close(loss, E * stats["train/loss/td"])


@pytest.mark.parametrize("steps", [1, 4])
def test_a_member_learns_only_from_its_own_batch(steps, monkeypatch):
    torch.manual_seed(0)
    # A tiny clip so that clipping is active: a global norm would couple the members.
    module = EnsembleDQNSVF(SPACE, dropout=0.0, init_std=0.1, grad_clip=1e-3)
    if steps > 1:
        # After one update a target network has moved towards its own member,
        # so bootstrapping from another member's target carries that member's
        # batch: pin every member to its own target to test the updates alone.
        monkeypatch.setattr(module, "draw_target_index", lambda device=None: torch.arange(E))
    twin = copy.deepcopy(module)
    batch = stacked(8, 8, [0, 1, 2, 3])
    changed = batch.clone()
    changed[1] = consistent_batch(8, 8, 99)
    for m, b in ((module, batch), (twin, changed)):
        opt = m.configure_optimizers()
        torch.manual_seed(1)
        for _ in range(steps):
            update(m, opt, b)
    for p, q in zip(module.q.parameters(), twin.q.parameters()):
        for e in (0, 2, 3):
            torch.testing.assert_close(p[e], q[e], rtol=1e-5, atol=1e-7)
    moved = [float((p[1] - q[1]).detach().abs().max()) for p, q in zip(module.q.parameters(), twin.q.parameters())]
    assert max(moved) > 1e-4


def test_gradient_norm_is_clipped_per_member():
    torch.manual_seed(0)
    module = EnsembleDQNSVF(SPACE)
    scale = torch.tensor([100.0, 1e-3, 1.0, 1e-4])
    for p in module.q.parameters():
        p.grad = torch.randn_like(p) * scale.view(-1, *[1] * (p.dim() - 1))
    before = [p.grad.clone() for p in module.q.parameters()]

    def norms():
        return torch.stack([p.grad.flatten(1).square().sum(1) for p in module.q.parameters()]).sum(0).sqrt()

    raw = norms()
    module.clip_gradients(None, 1.0, "norm")
    after = norms()
    assert raw[0] > 1 and raw[2] > 1 and raw[1] < 1 and raw[3] < 1
    torch.testing.assert_close(after[[0, 2]], torch.ones(2), rtol=1e-4, atol=0)
    for p, g in zip(module.q.parameters(), before):
        torch.testing.assert_close(p.grad[[1, 3]], g[[1, 3]])  # small members untouched


def test_members_share_the_rbf_encoders_statistics_and_train_their_own_encoders():
    torch.manual_seed(0)
    space = goal_space("sun_lightning/MountainCar-v0")
    module = EnsembleDQNSVF(space, dropout=0.0, init_std=0.3)
    module.observe(torch.tensor([[-1.2, -0.07], [0.6, 0.07], [-0.5, 0.0]]))
    # One set of statistics, read by online and target members alike.
    for net in (module.q, module.q_target):
        assert net.obs_encoder.stats is module.obs_stats and net.goal_encoder.stats is module.obs_stats
    assert module.q.obs_encoder.rbf.centres.shape[0] == E  # encoder parameters are per member
    obs, goal = torch.rand(3, 2) - 0.5, torch.rand(3, 4, 2) - 0.5
    goal_action = torch.randint(3, (3, 4))
    values = module.goal_values(obs, goal, goal_action)[0]
    for e in range(E):
        q = member_net(module, e)(obs.unsqueeze(1).expand(3, 4, 2), goal)
        expected = q.gather(-1, goal_action[..., None, None].expand(3, 4, 3, 1)).squeeze(-1).amax(-1)
        torch.testing.assert_close(values[e], expected)


def test_rejects_a_batch_without_the_member_axis():
    module = EnsembleDQNSVF(SPACE)
    with pytest.raises(ValueError, match=r"stacked as \[4\]"):
        module.loss(consistent_batch(4, 8, 0))
    with pytest.raises(ValueError, match=r"stacked as \[4\]"):
        module.loss(stacked(4, 8, [0, 1]))


def test_trains_end_to_end_with_lightning(monkeypatch):
    torch.manual_seed(0)
    module = EnsembleDQNSVF(SPACE)
    clips = []
    clip = module.clip_gradients
    monkeypatch.setattr(module, "clip_gradients", lambda *args: clips.append(args) or clip(*args))
    batch = stacked(8, 16, [0, 1, 2, 3])
    with torch.no_grad():
        q0, target0, _ = module.td_targets(batch, target_index=torch.arange(E))
        before = torch.nn.functional.huber_loss(q0, target0, reduction="none").flatten(1).mean(1)
    target_before = [p.clone() for p in module.q_target.parameters()]
    trainer = pl.Trainer(
        max_steps=15, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu"
    )
    # one item per training step: the list of its updates' batches (as ExplorationDataModule.stream yields)
    trainer.fit(module, DataLoader([[batch]] * 15, batch_size=None, collate_fn=lambda b: b))
    assert module.updates == 15
    assert len(clips) == 15 and clips[0][1:] == (module.hparams.grad_clip, "norm")  # per member, once per update
    with torch.no_grad():
        q1, target1, _ = module.td_targets(batch, target_index=torch.arange(E))
        after = torch.nn.functional.huber_loss(q1, target1, reduction="none").flatten(1).mean(1)
    assert (after < before).all()  # every member learned from its batch
    assert all(not torch.equal(a, b) for a, b in zip(module.q_target.parameters(), target_before))
    metrics = module.pop_train_metrics()
    assert metrics["train/updates/total"] == 15 and metrics["train/loss/td"] > 0


def test_discover_selects_with_the_ensemble_through_the_transform(monkeypatch):
    torch.manual_seed(0)
    learner = EnsembleDQNSVF(goal_space(THREE_ROOM), init_std=0.3)
    tiles = list(range(10, 30))
    replay = filled_replay(tiles, [t % 4 for t in tiles])
    storage, n = replay.storage, len(replay)
    monkeypatch.setattr(storage, "sample_index", lambda shape, generator=None: torch.arange(n).expand(*shape[:-1], n))
    env, transform = goal_env(DISCOVER(), replay, learner, num_envs=2)
    td = env.reset()
    candidates = storage.space.project(storage.get(torch.arange(n))[keys.OBS]).expand(2, n, -1)
    values = learner.goal_values(td[keys.OBS], candidates, torch.tensor([t % 4 for t in tiles]).expand(2, n))[0]
    std, mean = torch.std_mean(values, 0, correction=0)
    best = (mean + 10.0 * std).argmax(-1)
    assert td[keys.GOAL].argmax(-1).tolist() == [tiles[i] for i in best.tolist()]
    torch.testing.assert_close(transform.value_at_selection, mean[torch.arange(2), best])
    td[keys.ACTION] = learner.action_values(td[keys.OBS], td[keys.GOAL], td[keys.GOAL_ACTION]).argmax(-1)
    assert env.step(td)["next", keys.GOAL].shape == (2, storage.space.goal_dim)
