"""The DQN variant (SPEC §5a): network architecture and the TD(λ) targets of a batch, against a plain loop."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict

import sun_lightning.envs  # noqa: F401
from sun_lightning import keys
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.envs.registry import goal_space
from sun_lightning.networks.q_network import GoalQNetwork, dropout_mask

SPACE = goal_space("sun_lightning/FourRoomStuck-v0")


def test_network_shapes_init_and_biases():
    torch.manual_seed(0)
    net = GoalQNetwork(169, 169, 4)
    q = net(torch.randn(7, 169), torch.randn(7, 169))
    assert q.shape == (7, 4, 4)
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.bias is not None for m in linears] == [False] * (len(linears) - 1) + [True]
    weights = torch.cat([m.weight.flatten() for m in linears])
    assert abs(weights.std().item() - 0.01) < 0.0005 and abs(weights.mean().item()) < 0.0005
    assert net.maxout.linear.out_features == 4 * 64 and net.head[-1].out_features == 16
    assert all(m.bias is None for m in net.modules() if isinstance(m, torch.nn.LayerNorm))


def test_maxout_is_max_of_four_linear_maps():
    torch.manual_seed(0)
    net = GoalQNetwork(5, 5, 2)
    x = torch.randn(9, 192)
    w = net.maxout.linear.weight.view(4, 64, 192)  # piece-major layout
    pieces = torch.stack([x @ w[i].T for i in range(4)])
    torch.testing.assert_close(net.maxout(x), pieces.amax(0))
    # Gradient flows to the winning piece only.
    x.requires_grad_(True)
    net.maxout(x).sum().backward()
    winners = torch.nn.functional.one_hot(pieces.argmax(0), 4).permute(2, 0, 1).float()  # [4, N, 64]
    torch.testing.assert_close(x.grad, torch.einsum("pnu,pud->nd", winners, w))


def test_dropout_only_when_asked_and_at_its_rate():
    torch.manual_seed(0)
    net = GoalQNetwork(6, 6, 3)
    obs, goal = torch.randn(4, 6), torch.randn(4, 6)
    torch.testing.assert_close(net(obs, goal), net(obs, goal))
    assert not torch.equal(net(obs, goal, dropout=True), net(obs, goal))
    mask = dropout_mask(torch.Size([200_000]), 0.1, torch.device("cpu"))
    assert abs((mask == 0).float().mean().item() - 0.1) < 0.003
    assert torch.allclose(mask[mask > 0], torch.tensor(1 / 0.9))


def consistent_batch(n: int, t: int, seed: int) -> TensorDict:
    """Random runs where next_obs[t] = obs[t+1] except at episode ends, goals constant between terminal steps."""
    g = torch.Generator().manual_seed(seed)
    tiles = torch.randint(0, SPACE.obs_dim, (n, t + 1), generator=g)
    end = torch.rand(n, t, generator=g) < 0.2
    reset_tiles = torch.randint(0, SPACE.obs_dim, (n, t), generator=g)
    obs_tiles = tiles[:, :t].clone()
    next_tiles = tiles[:, 1:].clone()
    # After an episode end the next row starts from a reset state, not the final one.
    for i in range(n):
        for k in range(t - 1):
            if end[i, k]:
                next_tiles[i, k] = reset_tiles[i, k]
    reward = (torch.rand(n, t, generator=g) < 0.2).float()
    goal_tiles = torch.randint(0, SPACE.obs_dim, (n, t), generator=g)
    goal_action = torch.randint(0, 4, (n, t), generator=g)
    for i in range(n):
        for k in range(1, t):
            if reward[i, k - 1] == 0:  # the goal changes only after a terminal step
                goal_tiles[i, k], goal_action[i, k] = goal_tiles[i, k - 1], goal_action[i, k - 1]
    eye = torch.eye(SPACE.obs_dim)
    rows = torch.arange(n * t).view(n, t)
    return TensorDict(
        {
            # Tables without de-duplication: row (i, k) owns entry i * t + k.
            keys.STATES: torch.cat([eye[obs_tiles].flatten(0, 1), eye[next_tiles].flatten(0, 1)]),
            keys.GOALS: eye[goal_tiles].flatten(0, 1),
            keys.STATE_INDEX: rows,
            keys.NEXT_STATE_INDEX: rows + n * t,
            keys.GOAL_INDEX: rows,
            keys.ACTION: torch.randint(0, 4, (n, t), generator=g),
            keys.GOAL_ACTION: goal_action,
            keys.REWARD: reward,
            keys.TERMINATED: torch.rand(n, t, generator=g) < 0.05,
            keys.EPISODE_END: end,
        },
        batch_size=[],
    )


def rows_of(batch: TensorDict, key: str, index_key: str) -> torch.Tensor:
    return batch[key][batch[index_key]]


def reference_targets(module: DQNSVF, batch: TensorDict) -> torch.Tensor:
    """Watkins Q(λ) targets, one row and one step at a time, next states from next_obs."""
    gamma, lam = module.hparams.gamma, module.hparams.lam
    n, t = batch[keys.ACTION].shape
    next_obs, goals = rows_of(batch, keys.STATES, keys.NEXT_STATE_INDEX), rows_of(batch, keys.GOALS, keys.GOAL_INDEX)
    out = torch.zeros(n, t)
    with torch.no_grad():
        for i in range(n):
            ret = 0.0
            for k in reversed(range(t)):
                s_next, g, ga = next_obs[i, k], goals[i, k], int(batch[keys.GOAL_ACTION][i, k])
                q_on = module.q(s_next[None], g[None])[0, :, ga]
                q_tg = module.q_target(s_next[None], g[None])[0, :, ga]
                boot = min(float(q_tg[int(q_on.argmax())]), 1.0)
                cont = 0.0
                if k < t - 1 and not batch[keys.EPISODE_END][i, k]:
                    a_next = int(batch[keys.ACTION][i, k + 1])
                    cont = 1.0 if float(q_on[a_next]) >= float(q_on.max()) - (1 - gamma) else 0.0
                r = float(batch[keys.REWARD][i, k])
                done = r > 0 or bool(batch[keys.TERMINATED][i, k])
                ret = r + (0.0 if done else gamma * ((1 - lam * cont) * boot + lam * cont * ret))
                out[i, k] = ret
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_td_targets_match_a_plain_loop(seed):
    torch.manual_seed(seed)
    module = DQNSVF(SPACE, dropout=0.0, init_std=0.3)
    # Distinct target weights, so Double DQN's argmax/evaluation split matters.
    for p in module.q_target.parameters():
        p.data.add_(0.2 * torch.randn_like(p))
    batch = consistent_batch(6, 9, seed)
    q_taken, target, _ = module.td_targets(batch)
    torch.testing.assert_close(target, reference_targets(module, batch), atol=1e-5, rtol=1e-5)
    q_ref = module.q(rows_of(batch, keys.STATES, keys.STATE_INDEX), rows_of(batch, keys.GOALS, keys.GOAL_INDEX))
    q_ref = q_ref.gather(-1, batch[keys.GOAL_ACTION][..., None, None].expand(-1, -1, 4, 1)).squeeze(-1)
    torch.testing.assert_close(q_taken, q_ref.gather(-1, batch[keys.ACTION].unsqueeze(-1)).squeeze(-1))


def test_update_moves_q_towards_target_and_polyak_target():
    torch.manual_seed(0)
    module = DQNSVF(SPACE)
    opt = module.configure_optimizers()
    batch = consistent_batch(8, 16, 0)
    before = [p.clone() for p in module.q_target.parameters()]
    losses = []
    for _ in range(30):
        loss, _ = module.loss(batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.q.parameters(), module.hparams.grad_clip)
        opt.step()
        module.target_update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    online, target = list(module.q.parameters()), list(module.q_target.parameters())
    # One Polyak step moves the target by tau of the gap.
    gap = [o.detach() - t_ for o, t_ in zip(online, target)]
    old = [t_.clone() for t_ in target]
    module.target_update()
    for t_, o_, g_ in zip(target, old, gap):
        torch.testing.assert_close(t_ - o_, 0.001 * g_, atol=1e-7, rtol=1e-4)
    assert any(not torch.equal(a, b) for a, b in zip(before, target))


def test_rejects_continuous_actions_and_bad_discount():
    with pytest.raises(ValueError, match="gamma"):
        DQNSVF(SPACE, gamma=1.5)
    with pytest.raises(ValueError, match="goal_space"):
        DQNSVF(None)
    with pytest.raises(ValueError, match="discrete"):
        DQNSVF(dataclasses.replace(SPACE, num_actions=0, action_dim=2))


def test_table_forward_equals_row_forward():
    torch.manual_seed(0)
    net = GoalQNetwork(6, 5, 3)
    states, goals = torch.randn(10, 6), torch.randn(4, 5)
    i, j = torch.randint(10, (30,)), torch.randint(4, (30,))
    torch.testing.assert_close(net(states, goals, obs_index=i, goal_index=j), net(states[i], goals[j]))


def test_forward_is_the_concatenation_architecture():
    torch.manual_seed(0)
    net = GoalQNetwork(6, 5, 3, init_std=0.3)
    obs, goal = torch.randn(8, 6), torch.randn(8, 5)
    f_s, f_g = net.state_branch(obs, False), net.goal_branch(goal, False)
    h = net.maxout(torch.cat([f_s, f_g, f_s * f_g], -1))
    torch.testing.assert_close(net(obs, goal), net.head(h).view(8, 3, 3))


def test_table_forward_gradients_equal_the_concatenation_architecture():
    """The in-place table algebra and the one-mask maxout backward give autograd's gradients."""
    torch.manual_seed(0)
    net = GoalQNetwork(6, 5, 3, init_std=0.3)
    states, goals = torch.randn(10, 6), torch.randn(4, 5)
    i, j = torch.randint(10, (40,)), torch.randint(4, (40,))
    weight = torch.randn(40, 3, 3)
    (net(states, goals, obs_index=i, goal_index=j) * weight).sum().backward()
    fast = {name: p.grad.clone() for name, p in net.named_parameters()}
    net.zero_grad()
    f_s, f_g = net.state_branch(states[i], False), net.goal_branch(goals[j], False)
    pieces = net.maxout.linear(torch.cat([f_s, f_g, f_s * f_g], -1)).unflatten(-1, (net.maxout.pieces, -1))
    (net.head(pieces.max(-2).values).view(40, 3, 3) * weight).sum().backward()
    for name, p in net.named_parameters():
        # two float32 computation orders (and the kernels' polynomial exp): 1e-5 relative
        torch.testing.assert_close(fast[name], p.grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("k", [5, 1])  # 1: the adaptive check's one goal per state, evaluated without a state index
def test_goal_values_come_with_the_acting_values_of_each_candidate(k):
    torch.manual_seed(0)
    module = DQNSVF(SPACE, init_std=0.3)
    obs, goal = torch.randn(3, SPACE.obs_dim), torch.randn(3, k, SPACE.goal_dim)
    goal_action = torch.randint(0, 4, (3, k))
    values, acting = module.goal_values(obs, goal, goal_action)
    assert values.shape == (3, k) and acting.shape == (3, k, 4)
    torch.testing.assert_close(values, acting.amax(-1))
    for c in range(k):  # what act() would read for candidate c
        torch.testing.assert_close(acting[:, c], module.action_values(obs, goal[:, c], goal_action[:, c]))
    if k == 1:  # the same values as the general path's, for a batch of two copies
        both = module.goal_values(obs, goal.expand(3, 2, -1), goal_action.expand(3, 2))[1]
        torch.testing.assert_close(acting[:, 0], both[:, 1])


def test_goal_keys_evaluate_each_distinct_goal_once_with_the_same_values():
    torch.manual_seed(0)
    module = DQNSVF(SPACE, init_std=0.3)
    tiles = torch.randint(0, 5, (3, 40))  # 40 candidates per state over 5 tiles: many repeats
    goal = torch.eye(SPACE.obs_dim)[tiles]
    obs = torch.eye(SPACE.obs_dim)[torch.tensor([7, 8, 7])]
    goal_action = torch.randint(0, 4, (3, 40))
    rows = []
    handle = module.q.head.register_forward_hook(lambda m, args, out: rows.append(out.shape[0]))
    values, acting = module.goal_values(obs, goal, goal_action, goal_keys=tiles)
    ref_values, ref_acting = module.goal_values(obs, goal, goal_action)
    handle.remove()
    torch.testing.assert_close(values, ref_values, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(acting, ref_acting, rtol=1e-5, atol=1e-6)
    # the head ran on one row per distinct (state, tile), not on 120
    distinct = sum(len(set(t.tolist())) for t in tiles)
    assert rows == [distinct, 120]


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_the_lean_gradient_clip_is_torch_clip_grad_norm_bit_for_bit(max_norm):
    from sun_lightning.learners.dqn import clip_grad_norm

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in ((64, 19), (64,), (256, 192), (16, 64))]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    original = [p.grad.clone() for p in params]
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, g in zip(ref_params, original):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(ref_params, max_norm, foreach=True)
    clip_grad_norm(params, max_norm)
    assert all(torch.equal(p.grad, r.grad) for p, r in zip(params, ref_params))
    assert (max_norm > 100) == all(torch.equal(p.grad, g) for p, g in zip(params, original))  # clipped only when over
