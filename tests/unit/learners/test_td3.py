"""The TD3 variant (SPEC §5b): networks, future-goal relabelling and TD(λ) targets against slow loops,
policy delay, target smoothing, the critic target's Polyak rate and the bootstrap actor that follows each actor step."""

from __future__ import annotations

import pytest
import torch

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.learners.td3 import TD3SVF
from sun_lightning.networks.td3 import GoalActor, GoalCritic
from sun_lightning.replay.future import FutureGoalSampler
from sun_lightning.replay.storage import GoalReplayStorage

# A 3-dim state whose first two coordinates are the goal, 2-dim actions, reach 0.5 (a point-maze-like space).
SPACE = GoalSpace(obs_dim=3, num_actions=0, action_dim=2, goal_dims=(0, 1), low=(-4.0, -4.0), high=(4.0, 4.0),
                  rho=0.1, reach="distance", eta=0.5)
SMALL = dict(hidden=32, features=16, maxout_width=64, head_width=32, rbf_centres=5)


def storage_of_walks(steps: int = 120, num_envs: int = 3, capacity: int = 300, seed: int = 0) -> GoalReplayStorage:
    """Random walks, one per env; about one step in ten ends an episode (half of those terminate)."""
    g = torch.Generator().manual_seed(seed)
    storage = GoalReplayStorage(SPACE, num_envs, capacity)
    pos = torch.zeros(num_envs, 3)
    for _ in range(steps):
        action = torch.rand(num_envs, 2, generator=g) * 2 - 1
        nxt = pos + 0.5 * torch.cat([action, torch.zeros(num_envs, 1)], 1)
        end = torch.rand(num_envs, generator=g) < 0.1
        storage.extend({keys.OBS: pos.clone(), keys.ACTION: action, keys.NEXT_OBS: nxt,
                        keys.TERMINATED: end & (torch.rand(num_envs, generator=g) < 0.5), keys.EPISODE_END: end})
        pos = torch.where(end.unsqueeze(1), torch.zeros_like(nxt), nxt)
    return storage


def test_networks_shapes_and_output_ranges():
    torch.manual_seed(0)
    learner = TD3SVF(SPACE)  # the paper's sizes
    net = learner.critic.net
    assert net.first[0].out_features == 256 and net.first[-1].out_features == 64
    assert net.maxout.linear.out_features == 4 * 1024 and net.maxout.linear.in_features == 3 * 64
    assert net.head[2].out_features == 256 and net.head[-1].out_features == 1
    assert learner.actor.net.head[-1].out_features == 2
    assert learner.critic.net.first[0].in_features == 3 * 20 + 2  # RBF of the state, then the raw action
    obs, goal = torch.randn(7, 3) * 10, torch.randn(7, 2) * 10
    action = learner.actor(obs, goal)
    assert action.shape == (7, 2) and action.abs().max() <= 1.0
    values = learner.critic(obs, action, goal)
    assert (values >= 0).all()
    # V starts near softplus(-2) ≈ 0.127 everywhere: "not reachable yet"
    torch.testing.assert_close(values, torch.full_like(values, 0.1269), atol=0.02, rtol=0)
    assert not set(map(id, learner.critic.parameters())) & set(map(id, learner.actor.parameters()))
    values, acting = learner.goal_values(obs[:2], goal.view(1, 7, 2).expand(2, 7, 2))
    assert values.shape == (2, 7) and acting is None
    torch.testing.assert_close(values[1, 3], learner.critic(obs[1], learner.actor(obs[1], goal[3]), goal[3]))


def test_future_goals_come_from_the_same_trajectory_within_the_horizon():
    storage = storage_of_walks()
    sampler = FutureGoalSampler(batch_size=64, horizon=7)
    g = torch.Generator().manual_seed(1)
    batch = sampler.sample(storage, generator=g, count=4)
    assert batch.batch_size == (4, 64)
    columns = storage.columns
    obs, nxt, end = columns[keys.OBS], columns[keys.NEXT_OBS], columns[keys.EPISODE_END]
    b = storage.num_envs
    # index of each row's entry: its OBS and ACTION are unique in the walks
    for flat in batch.reshape(-1).unbind(0):
        i = int(((obs == flat[keys.OBS]).all(1) & (columns[keys.ACTION] == flat[keys.ACTION]).all(1)).nonzero()[0])
        # the stream from entry i, one step at a time (slow loop), until an episode end or the newest step
        path, j = [], i
        newest = (storage.steps - 1) * b + i % b
        while len(path) < 7:
            path.append(j)
            if bool(end[j]) or j % storage.capacity == newest % storage.capacity:
                break
            j = (j + b) % storage.capacity
        k = int(flat[keys.PATH_VALID].sum())
        assert flat[keys.PATH_VALID].tolist() == [t < k for t in range(7)]
        for t in range(k):
            torch.testing.assert_close(flat[keys.PATH_NEXT_OBS][t], nxt[path[t]])
        if flat[keys.FUTURE]:
            assert 1 <= k <= len(path)
            torch.testing.assert_close(flat[keys.GOAL], nxt[path[k - 1]][:2])  # the state the path reaches
        else:
            assert k == 1 and (flat[keys.GOAL].abs() <= 4.0).all()
    frac = batch[keys.FUTURE].float().mean()
    assert 0.35 < frac < 0.65


def slow_targets(learner: TD3SVF, batch) -> torch.Tensor:
    """The TD(λ) target of each row, one row and one step at a time (no smoothing noise)."""
    hp = learner.hparams
    out = []
    with torch.no_grad():
        for row in batch.unbind(0):
            g = row[keys.GOAL]
            k = int(row[keys.PATH_VALID].sum())
            ret = 0.0
            for j in reversed(range(k)):
                s = row[keys.PATH_NEXT_OBS][j]
                r = float((s[:2] - g).norm() < 0.5)
                done = r > 0 or bool(row[keys.PATH_TERMINATED][j])
                boot = float(learner.critic_target(s, learner.actor_target(s, g), g))
                if j == k - 1:
                    ret = r + (0.0 if done else hp.gamma * boot)
                else:
                    ret = r + (0.0 if done else hp.gamma * ((1 - hp.lam) * boot + hp.lam * ret))
            out.append(ret)
    return torch.tensor(out)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("paths", ["compact", "padded"])
def test_td_lambda_targets_match_a_slow_loop(seed, paths):
    torch.manual_seed(seed)
    learner = TD3SVF(SPACE, target_noise=0.0, paths=paths, **SMALL)
    with torch.no_grad():  # targets apart from the online networks, values of a useful size
        for p in [*learner.critic_target.parameters(), *learner.actor_target.parameters()]:
            p.add_(0.3 * torch.randn_like(p))
    batch = FutureGoalSampler(batch_size=48, horizon=9).sample(storage_of_walks(seed=seed),
                                                                generator=torch.Generator().manual_seed(seed))
    target, steps = learner.td_targets(batch)
    torch.testing.assert_close(target, slow_targets(learner, batch), rtol=1e-5, atol=1e-6)
    assert (target[batch[keys.FUTURE]] > 0).all()  # a future goal is reached at its path's end: reward 1
    assert steps > 1


def test_target_smoothing_noise_is_clipped(monkeypatch):
    torch.manual_seed(0)
    learner = TD3SVF(SPACE, **SMALL)
    seen = []
    critic = learner.critic_target.forward

    def spy(obs, action, goal, goal_index=None):
        seen.append(action - learner.actor_target(obs, goal, goal_index))
        return critic(obs, action, goal, goal_index)

    monkeypatch.setattr(learner.critic_target, "forward", spy)
    monkeypatch.setattr(torch, "randn_like", lambda x: torch.full_like(x, 100.0))  # huge draws: clipped at 0.5
    batch = FutureGoalSampler(batch_size=32, horizon=5).sample(storage_of_walks())
    learner.td_targets(batch)
    noise = torch.cat(seen)  # action − π'(s', g): the clipped noise, less where the clip to [−1, 1] bit
    assert (noise <= 0.5 + 1e-6).all() and torch.isclose(noise.max(), torch.tensor(0.5))


def test_policy_delay_the_critic_targets_rate_and_the_bootstrap_actor():
    torch.manual_seed(0)
    learner = TD3SVF(SPACE, **SMALL).double()
    storage = storage_of_walks()
    critic_opt, actor_opt = learner.configure_optimizers()
    learner.optimizers = lambda: (critic_opt, actor_opt)
    learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    sampler = FutureGoalSampler(batch_size=32, horizon=5)
    actors, critic_targets, actor_targets = [], [], []

    def snapshot(net):
        return [p.detach().clone() for p in net.parameters()]

    for _ in range(4):
        before = (snapshot(learner.critic), snapshot(learner.actor), snapshot(learner.critic_target),
                  snapshot(learner.actor_target))
        learner.update(sampler.sample(storage).apply(lambda x: x.double() if x.is_floating_point() else x))
        after = (snapshot(learner.critic), snapshot(learner.actor), snapshot(learner.critic_target),
                 snapshot(learner.actor_target))
        actors.append(any(not torch.equal(a, b) for a, b in zip(before[1], after[1])))
        changed = any(not torch.equal(a, b) for a, b in zip(before[2], after[2]))
        critic_targets.append(changed)
        if changed:  # by tau of the gap to the online critic after its step
            for o, n, p in zip(before[2], after[2], after[0]):
                torch.testing.assert_close(n - o, 0.005 * (p - o), rtol=1e-6, atol=1e-15)
        changed = any(not torch.equal(a, b) for a, b in zip(before[3], after[3]))
        actor_targets.append(changed)
        if changed:  # the actor before its step, moved 0.005 towards the actor after it
            for pre, n, post in zip(before[1], after[3], after[1]):
                assert torch.equal(n, torch.lerp(pre, post, 0.005))
    assert learner.updates == 4
    assert actors == [False, True, False, True]  # policy delay 2
    assert critic_targets == actor_targets == [False, True, False, True]  # with the actor's step, every 2 updates
    metrics = learner.pop_train_metrics()
    assert metrics["train/updates/total"] == 4 and "train/loss/actor" in metrics and "train/loss/td" in metrics


def test_rejects_discrete_actions():
    import dataclasses

    with pytest.raises(ValueError, match="continuous"):
        TD3SVF(dataclasses.replace(SPACE, num_actions=4, action_dim=0))


def test_actor_and_critic_classes_take_their_encoders():
    from sun_lightning.networks.encoders import RunningMeanStd, StandardizedRBF

    stats = RunningMeanStd(3)
    critic = GoalCritic(StandardizedRBF(stats, None, 4), StandardizedRBF(stats, (0, 1), 4), 2, hidden=8, features=4,
                        maxout_width=8, head_width=8)
    actor = GoalActor(StandardizedRBF(stats, None, 4), StandardizedRBF(stats, (0, 1), 4), 2, hidden=8, features=4,
                      maxout_width=8, head_width=8)
    obs, goal = torch.randn(5, 3), torch.randn(5, 2)
    assert critic(obs, actor(obs, goal), goal).shape == (5,)


# ---- the 4-critic ensemble of DISCOVER / AdaGoal ------------------------------------------------------------
@pytest.mark.parametrize("paths", ["compact", "padded"])
def test_ensemble_members_learn_their_own_batches_with_their_own_targets(paths):
    from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF

    torch.manual_seed(0)
    learner = EnsembleTD3SVF(SPACE, target_noise=0.0, paths=paths, **SMALL)
    assert learner.batches_per_update == 4
    for p, t in zip(learner.critic.parameters(), learner.critic_target.parameters()):
        assert p.shape[0] == 4 and torch.equal(p.detach(), t)
    weights = [p for name, p in learner.critic.named_parameters() if name.endswith("weight") and p.dim() == 3]
    assert all(not torch.equal(w[0], w[1]) for w in weights)  # independent initialisations
    with torch.no_grad():
        for p in learner.critic_target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    storage = storage_of_walks()
    batch = FutureGoalSampler(batch_size=24, horizon=6).sample(storage, generator=torch.Generator().manual_seed(3),
                                                               count=4)
    loss, stats = learner.critic_loss(batch)
    expected = 0.0
    for e in range(4):  # member e as a stand-alone TD3 learner: its slices, its own target
        single = TD3SVF(SPACE, target_noise=0.0, **SMALL)
        single.obs_stats = learner.obs_stats
        for net, stacked in ((single.critic, learner.critic), (single.critic_target, learner.critic_target)):
            for (name, p), (_, q) in zip(net.named_parameters(), stacked.named_parameters()):
                p.data.copy_(q.data[e])
            net.obs_encoder.stats = net.goal_encoder.stats = learner.obs_stats
        single.actor_target.load_state_dict(learner.actor_target.state_dict())
        target = slow_targets(single, batch[e])
        q = single.critic(batch[e][keys.OBS], batch[e][keys.ACTION], batch[e][keys.GOAL])
        expected = expected + torch.nn.functional.mse_loss(q, target)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    values, _ = learner.goal_values(torch.randn(3, 3), torch.randn(3, 5, 2))
    assert values.shape == (4, 3, 5) and values.std(0).mean() > 0  # the members disagree
    with pytest.raises(ValueError, match=r"stacked as \[4, N\]"):
        learner.critic_loss(batch[0])


def test_a_goal_of_the_wrong_dimension_is_named():
    learner = TD3SVF(SPACE, **SMALL)
    with pytest.raises(ValueError, match=r"goal of shape \(2, 4, 3\): the goal space has 2 dimensions"):
        learner.goal_values(torch.zeros(2, 3), torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match=r"goal of shape \(2, 1\)"):
        learner.act(torch.zeros(2, 3), torch.zeros(2, 1))


@pytest.mark.parametrize("ensemble", [False, True])
def test_the_bootstrap_actor_is_the_previous_actor_steps_online_actor(ensemble):
    """DISCOVER's td3_train.py: ``target_policy = soft_update(policy_old, policy_new, tau)`` at every actor step.
    After several actor steps the bootstrap actor (what the TD targets and DISCOVER's and MEGA's selections read)
    is the online actor of the previous actor step moved τ towards the current one, weight for weight: it does
    not lag behind a near-random initialisation by a 5e-7 Polyak rate."""
    from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF

    torch.manual_seed(0)
    learner = (EnsembleTD3SVF if ensemble else TD3SVF)(SPACE, **SMALL)
    critic_opt, actor_opt = learner.configure_optimizers()
    learner.optimizers = lambda: (critic_opt, actor_opt)
    learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    storage, sampler = storage_of_walks(), FutureGoalSampler(batch_size=32, horizon=5)
    count = learner.batches_per_update if ensemble else None
    initial = [p.detach().clone() for p in learner.actor_target.parameters()]
    actors = []  # the online actor after each actor step
    for _ in range(8):  # policy delay 2: four actor steps
        learner.update(sampler.sample(storage, count=count))
        if learner.updates % 2 == 0:
            actors.append([p.detach().clone() for p in learner.actor.parameters()])
    assert len(actors) == 4
    tau = learner.hparams.critic_tau
    for target, previous, current in zip(learner.actor_target.parameters(), actors[-2], actors[-1]):
        assert torch.equal(target, torch.lerp(previous, current, tau))
    # and it has moved with the actor: as far from its initial weights as the online actor of the last step but one
    drift = sum(float((t - i).norm()) for t, i in zip(learner.actor_target.parameters(), initial))
    online = sum(float((p - i).norm()) for p, i in zip(actors[-2], initial))
    assert drift > 0.9 * online > 0
