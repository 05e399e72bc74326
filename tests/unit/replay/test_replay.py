"""Replay storage (sequences, exact counts, eviction) and the segmented-HER batches (SPEC §4, §5a)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import THREE_ROOM, filled_replay
from sun_lightning import keys
from sun_lightning.replay.hindsight import SegmentedHindsightSampler


def brute_force_counts(storage) -> torch.Tensor:
    """Count of each stored entry = stored entries with the same (tile, action)."""
    entries = storage.get(torch.arange(len(storage)))
    cell = entries[keys.OBS].argmax(-1) * storage.space.num_actions + entries[keys.ACTION]
    return (cell[:, None] == cell[None, :]).sum(1).float()


def test_exact_counts_match_brute_force_with_eviction():
    g = torch.Generator().manual_seed(0)
    tiles = torch.randint(0, 6, (400,), generator=g).tolist()
    actions = torch.randint(0, 4, (400,), generator=g).tolist()
    replay = filled_replay(tiles, actions, num_envs=4, capacity=120)
    assert len(replay) == 120 and len(replay.pseudocount) == 120
    torch.testing.assert_close(replay.counts(torch.arange(120)), brute_force_counts(replay.storage))
    # The visit table holds the last 120 inserts exactly.
    expected = torch.zeros(72 * 4, dtype=torch.long)
    for tile, action in zip(tiles[-120:], actions[-120:]):
        expected[tile * 4 + action] += 1
    assert torch.equal(replay.pseudocount.visits(), expected)


def test_sequences_are_consecutive_steps_of_one_env():
    num_envs, steps = 3, 50
    # Encode (step, env) in the tile so the order can be read back.
    tiles = [(s * num_envs + e) % 72 for s in range(steps) for e in range(num_envs)]
    storage = filled_replay(tiles, [0] * len(tiles), num_envs=num_envs, capacity=90).storage
    index = storage.sequence_index(200, 16, torch.Generator().manual_seed(1))
    flat = storage.get(index)[keys.OBS].argmax(-1)
    assert index.shape == (200, 16)
    # Consecutive entries of one env are num_envs apart in the write order.
    diffs = (flat[:, 1:] - flat[:, :-1]) % 72
    assert (diffs == num_envs).all()
    # Only the 30 steps still held (capacity 90 / 3 envs) can start a run.
    oldest_tile = (steps - 30) * num_envs % 72
    offset = (flat[:, 0] - oldest_tile) % 72
    assert offset.max() <= (30 - 16) * num_envs + num_envs - 1
    assert offset.unique().numel() > 30  # starts spread over the held steps


def test_segmented_batch_layout_rewards_and_goals():
    g = torch.Generator().manual_seed(0)
    num_envs, steps = 2, 200
    tiles = torch.randint(0, 72, (steps * num_envs,), generator=g).tolist()
    actions = torch.randint(0, 4, (steps * num_envs,), generator=g).tolist()
    storage = filled_replay(tiles, actions, num_envs=num_envs, capacity=1000).storage
    sampler = SegmentedHindsightSampler()
    check_segmented_batch(sampler.sample(storage, generator=g))
    assert sampler.rows == 2048


@pytest.mark.parametrize("count", [1, 3])
def test_several_batches_in_one_draw_are_each_a_batch(count):
    g = torch.Generator().manual_seed(1)
    num_envs, steps = 2, 200
    tiles = torch.randint(0, 72, (steps * num_envs,), generator=g).tolist()
    actions = torch.randint(0, 4, (steps * num_envs,), generator=g).tolist()
    storage = filled_replay(tiles, actions, num_envs=num_envs, capacity=1000).storage
    batches = SegmentedHindsightSampler().sample(storage, generator=g, count=count)
    assert batches.batch_size == (count,)
    for batch in batches.unbind(0):
        check_segmented_batch(batch)
    if count > 1:  # independent draws, not copies
        assert not torch.equal(batches[0][keys.STATES], batches[1][keys.STATES])
    with pytest.raises(ValueError, match="count must be positive"):
        SegmentedHindsightSampler().sample(storage, count=0)


def check_segmented_batch(batch):
    """Layout, positives, rewards and negatives of one 16 × 16 × 4 × 2 batch over 72 tiles."""
    assert batch[keys.ACTION].shape == (128, 16)
    assert batch[keys.STATES].shape == (2 * 256, 72) and batch[keys.GOALS].shape == (256 + 64, 72)

    def rows(key, index_key):
        return batch[key][batch[index_key]].view(16, 4, 2, 16, -1)

    obs_tile = rows(keys.STATES, keys.STATE_INDEX).argmax(-1)
    goal_tile = rows(keys.GOALS, keys.GOAL_INDEX).argmax(-1)
    action = batch[keys.ACTION].view(16, 4, 2, 16)
    goal_action = batch[keys.GOAL_ACTION].view(16, 4, 2, 16)
    # Every relabelled copy carries the same run; next states are the stored ones.
    assert (obs_tile == obs_tile[:, :1, :1]).all() and (action == action[:, :1, :1]).all()
    assert torch.equal(batch[keys.NEXT_STATE_INDEX], batch[keys.STATE_INDEX] + 256)
    # Positives: each goal is the (tile, action) of a step at or after t.
    for s in range(16):
        run_tiles, run_actions = obs_tile[s, 0, 0], action[s, 0, 0]
        for r in range(4):
            for t in range(16):
                future = [(int(run_tiles[k]), int(run_actions[k])) for k in range(t, 16)]
                assert (int(goal_tile[s, r, 0, t]), int(goal_action[s, r, 0, t])) in future
    # Reward is 1 exactly where (s_t, a_t) equals the goal.
    match = (obs_tile == goal_tile) & (action == goal_action)
    assert torch.equal(batch[keys.REWARD].view(16, 4, 2, 16).bool(), match)
    assert batch[keys.REWARD].view(16, 4, 2, 16)[:, :, 0].sum(-1).min() >= 1  # every run ends a segment on a cut
    # Negatives: one goal for the whole run.
    assert (goal_tile[:, :, 1] == goal_tile[:, :, 1, :1]).all()


def random_storage(env_id: str, steps: int, num_envs: int = 4, capacity: int = 1000, seed: int = 0):
    """A storage written through ``extend`` with random transitions: one-hot observations on gridworlds,
    Gaussian ones elsewhere; about one step in eight ends an episode, half of those terminate."""
    from sun_lightning.envs.registry import goal_space
    from sun_lightning.replay.storage import GoalReplayStorage

    space = goal_space(env_id)
    storage = GoalReplayStorage(space, num_envs, capacity)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if space.exact_counts:
            obs = torch.nn.functional.one_hot(torch.randint(0, space.obs_dim, (num_envs,), generator=g), space.obs_dim).float()
        else:
            obs = torch.randn(num_envs, space.obs_dim, generator=g)
        end = torch.rand(num_envs, generator=g) < 0.125
        storage.extend({
            keys.OBS: obs,
            keys.ACTION: torch.randint(0, space.num_actions, (num_envs,), generator=g),
            keys.NEXT_OBS: obs.roll(1, -1),
            keys.TERMINATED: end & (torch.rand(num_envs, generator=g) < 0.5),
            keys.EPISODE_END: end,
        })
    return storage


@pytest.mark.parametrize("negatives", [True, False])
@pytest.mark.parametrize("count", [None, 3])
def test_radius_rule_rewards_match_a_per_row_check(negatives, count):
    """On classic control a row is rewarded where its state is within ρ of its goal (standardized) and its
    action is the goal action (SPEC §2), checked row by row; traces and segments follow the runs."""
    storage = random_storage("sun_lightning/CartPole-v0", steps=300, capacity=1000)  # wraps: 1200 written
    space = storage.space
    sampler = SegmentedHindsightSampler(num_sequences=8, length=12, relabels=3, negatives=negatives)
    rewarded = 0
    for seed in range(3):
        scale = torch.tensor([0.02, 0.02]) * (1 + 40 * seed)  # a wide σ̃ rewards negatives and far positives too
        batch = sampler.sample(storage, scale, torch.Generator().manual_seed(seed), count)
        flat = batch if count is None else batch[count - 1]
        states, goals = flat[keys.STATES], flat[keys.GOALS]
        for n in range(flat[keys.ACTION].shape[0]):
            for t in range(flat[keys.ACTION].shape[1]):
                s = space.project(states[flat[keys.STATE_INDEX][n, t]])
                g = goals[flat[keys.GOAL_INDEX][n, t]]
                near = float((((s - g) / scale) ** 2).sum()) <= space.rho**2
                same = int(flat[keys.ACTION][n, t]) == int(flat[keys.GOAL_ACTION][n, t])
                assert bool(flat[keys.REWARD][n, t]) == (near and same), (n, t)
        rewarded += int(batch[keys.REWARD].sum())
        assert batch[keys.EPISODE_END].any() and batch[keys.TERMINATED].any()
    assert 0 < rewarded


def test_sampler_draws_are_reproducible():
    storage = random_storage(THREE_ROOM, steps=100)
    sampler = SegmentedHindsightSampler()
    a = sampler.sample(storage, generator=torch.Generator().manual_seed(5), count=2)
    b = sampler.sample(storage, generator=torch.Generator().manual_seed(5), count=2)
    assert all(torch.equal(a[key], b[key]) for key in a.keys())


def test_extend_writes_consecutive_slices_and_tiles():
    storage = random_storage(THREE_ROOM, steps=300, num_envs=4, capacity=1000)
    # 1200 entries into 1000: the last 200 overwrote positions 0..199.
    entries = storage.get(torch.arange(1000))
    assert torch.equal(storage.tiles, entries[keys.OBS].argmax(-1))
    fresh = random_storage(THREE_ROOM, steps=300, num_envs=4, capacity=2000)
    assert torch.equal(storage.get(torch.arange(200, 1000))[keys.OBS], fresh.get(torch.arange(200, 1000))[keys.OBS])
    assert torch.equal(storage.get(torch.arange(200))[keys.OBS], fresh.get(torch.arange(1000, 1200))[keys.OBS])
    assert torch.equal(storage.get(torch.arange(200))[keys.EPISODE_END], fresh.get(torch.arange(1000, 1200))[keys.EPISODE_END])


def test_batches_already_on_the_learner_device_skip_the_transfer():
    from sun_lightning.exploration.datamodule import ExplorationDataModule

    dm = ExplorationDataModule(env_id=THREE_ROOM, warmup_frames=64)
    batches = list(SegmentedHindsightSampler().sample(random_storage(THREE_ROOM, steps=100), count=2).unbind(0))
    cpu = torch.device("cpu")
    assert all(b.device == cpu for b in batches)
    assert dm.transfer_batch_to_device(batches, cpu, 0) is batches
    # Batches without a device still go through Lightning's move.
    loose = [b.copy().clear_device_() for b in batches]
    moved = dm.transfer_batch_to_device(loose, cpu, 0)
    assert moved is not loose and all(b.device == cpu for b in moved)
    assert all(torch.equal(m[keys.STATES], b[keys.STATES]) for m, b in zip(moved, batches))
