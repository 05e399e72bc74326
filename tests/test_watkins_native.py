"""The C Watkins Q(λ) targets (``losses/watkins_native.py``) against the tensor functions of ``td_lambda.py``."""

from __future__ import annotations

import pytest
import torch

from sun_lightning.agents.dqn import DQNSVF
from sun_lightning.losses import watkins_native
from sun_lightning.losses.td_lambda import double_q_bootstrap, greedy_within, watkins_lambda_returns
from test_dqn import SPACE, consistent_batch

GAMMA, LAM, CLIP = 0.9, 0.8, 1.0


def random_case(n: int, t: int, a: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    episode_end = torch.rand(n, t, generator=g) < 0.25
    extra = episode_end.clone()
    extra[:, -1] = True
    rows = n * t + int(extra.sum())
    q_on = torch.rand(rows, a, generator=g) * 1.4 - 0.2  # some above the bootstrap clip
    q_tg = torch.rand(rows, a, generator=g) * 1.4 - 0.2
    if a > 2:
        q_on[::5, 1] = q_on[::5, 0]  # exact ties: the first maximal action is the argmax
        q_on[1::7, 2] = q_on[1::7].amax(1) - 0.5 * (1 - GAMMA)  # near-greedy, inside the tolerance
    action = torch.randint(a, (n, t), generator=g)
    reward = (torch.rand(n, t, generator=g) < 0.15).float()
    terminated = torch.rand(n, t, generator=g) < 0.1
    return q_on, q_tg, action, reward, terminated, episode_end, extra


def reference(q_on, q_tg, action, reward, terminated, extra):
    """Next-state rows by a plain loop, then the tensor functions of td_lambda.py."""
    n, t = action.shape
    nxt, extra_row = [], n * t
    for i in range(n):
        for k in range(t):
            if extra[i, k]:
                nxt.append(extra_row)
                extra_row += 1
            else:
                nxt.append(i * t + k + 1)
    nxt = torch.tensor(nxt)
    on, tg = q_on[nxt].view(n, t, -1), q_tg[nxt].view(n, t, -1)
    bootstrap = double_q_bootstrap(on, tg, CLIP)
    cont = greedy_within(on, torch.roll(action, -1, 1), 1 - GAMMA) & ~extra
    done = (reward > 0) | terminated
    return watkins_lambda_returns(reward, done.float(), bootstrap, cont.float(), GAMMA, LAM), cont


@pytest.mark.parametrize("n,t,a,seed", [(6, 9, 4, 0), (16, 16, 9, 1), (3, 1, 2, 2), (1, 5, 1, 3)])
def test_matches_the_tensor_functions(n, t, a, seed):
    q_on, q_tg, action, reward, terminated, episode_end, extra = random_case(n, t, a, seed)
    target, cont = watkins_native.watkins_targets(q_on, q_tg, action, reward, terminated, episode_end, GAMMA, LAM,
                                                  CLIP, 1 - GAMMA)
    ref_target, ref_cont = reference(q_on, q_tg, action, reward, terminated, extra)
    assert torch.equal(cont, ref_cont)
    torch.testing.assert_close(target, ref_target, rtol=1e-6, atol=1e-6)
    if t > 1:
        assert cont.any() and not cont.all()


def test_no_clip_lets_bootstraps_above_one_through():
    q_on, q_tg, action, reward, terminated, episode_end, extra = random_case(4, 6, 3, 5)
    clipped = watkins_native.watkins_targets(q_on, q_tg, action, reward, terminated, episode_end, GAMMA, LAM, 1.0, 0.1)
    free = watkins_native.watkins_targets(q_on, q_tg, action, reward, terminated, episode_end, GAMMA, LAM, None, 0.1)
    assert (free[0] >= clipped[0]).all() and (free[0] > clipped[0]).any()


def test_bad_rows_and_actions_are_errors():
    q_on, q_tg, action, reward, terminated, episode_end, _ = random_case(4, 6, 3, 7)
    args = (reward, terminated, episode_end, GAMMA, LAM, CLIP, 0.1)
    with pytest.raises(ValueError, match="value rows for 4×6 steps"):
        watkins_native.watkins_targets(q_on[:-1], q_tg[:-1], action, *args)
    with pytest.raises(ValueError, match="target values"):
        watkins_native.watkins_targets(q_on, q_tg[:-1], action, *args)
    with pytest.raises(IndexError, match=r"outside \[0, 3\)"):
        watkins_native.watkins_targets(q_on, q_tg, action.masked_fill(action == 0, 3), *args)


@pytest.mark.parametrize("seed", [0, 1])
def test_td_targets_take_the_same_values_either_way(seed, monkeypatch):
    torch.manual_seed(seed)
    module = DQNSVF(SPACE, dropout=0.0, init_std=0.3)
    for p in module.q_target.parameters():
        p.data.add_(0.2 * torch.randn_like(p))
    batch = consistent_batch(6, 9, seed)
    native = module.td_targets(batch)
    monkeypatch.setattr(watkins_native, "applies", lambda q: False)
    tensor = module.td_targets(batch)
    torch.testing.assert_close(native[0], tensor[0], rtol=0, atol=0)
    torch.testing.assert_close(native[1], tensor[1], rtol=1e-6, atol=1e-6)
    assert torch.equal(native[2], tensor[2])


@pytest.mark.parametrize("n,t,seed", [(6, 9, 0), (16, 16, 1), (3, 1, 2)])
def test_q_rows_follow_the_layout(n, t, seed):
    # The steps in flat order, then one row per extra step (episode end or last step) holding its
    # next state with the step's goal and goal action: the layout watkins_targets reads.
    g = torch.Generator().manual_seed(seed)
    state, next_state = torch.randint(50, (n, t), generator=g), torch.randint(50, (n, t), generator=g)
    goal, goal_action = torch.randint(30, (n, t), generator=g), torch.randint(4, (n, t), generator=g)
    episode_end = torch.rand(n, t, generator=g) < 0.3
    expected = [[], [], []]
    for i in range(n):
        for k in range(t):
            for out, x in zip(expected, (state, goal, goal_action)):
                out.append(int(x[i, k]))
    for i in range(n):
        for k in range(t):
            if episode_end[i, k] or k == t - 1:
                for out, x in zip(expected, (next_state, goal, goal_action)):
                    out.append(int(x[i, k]))
    rows = watkins_native.q_rows(state, next_state, goal, goal_action, episode_end)
    for got, want in zip(rows, expected):
        assert got.tolist() == want


def test_td_targets_fall_back_after_the_c_rows_when_q_is_not_float32(monkeypatch):
    # C rows (float32 tables) but values the C targets do not take: the tensor functions finish the job.
    torch.manual_seed(0)
    module = DQNSVF(SPACE, dropout=0.0, init_std=0.3)
    batch = consistent_batch(6, 9, 0)
    native = module.td_targets(batch)
    applies, asked = watkins_native.applies, []
    monkeypatch.setattr(watkins_native, "applies", lambda x: asked.append(x.requires_grad) or (applies(x) and not x.requires_grad))
    mixed = module.td_targets(batch)
    assert asked == [False, True]  # yes for the tables (C rows), no for the values
    torch.testing.assert_close(mixed[1], native[1], rtol=1e-6, atol=1e-6)
    assert torch.equal(mixed[2], native[2])
