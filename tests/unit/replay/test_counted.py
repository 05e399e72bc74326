"""D and its pseudocounts kept in step by one owner (SPEC §4, §5d): written together, σ̃ read once, saved and
restored together, and counted again when a run resumes with another capacity."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from sun_lightning import keys
from sun_lightning.envs.registry import goal_space
from sun_lightning.exploration.build import build_pseudocount
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.storage import GoalReplayStorage
from tests.helpers import THREE_ROOM, filled_replay

POINT_MAZE_S = "sun_lightning/PointMazeS-v0"


def point_replay(steps: int, capacity: int, backend: str = "torch", num_envs: int = 4, seed: int = 0) -> CountedReplay:
    """A PointMaze-S replay with the radius pseudocount, written with ``steps`` random vector steps."""
    space = goal_space(POINT_MAZE_S)
    storage = GoalReplayStorage(space, num_envs, capacity)
    replay = CountedReplay(storage, build_pseudocount(space, storage.capacity, 8, torch.device("cpu"), backend))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        obs = torch.randn(num_envs, space.obs_dim, generator=generator)
        replay.extend(TensorDict({keys.OBS: obs, keys.ACTION: torch.rand(num_envs, 2, generator=generator),
                                  keys.NEXT_OBS: obs, keys.TERMINATED: torch.zeros(num_envs, dtype=torch.bool),
                                  keys.EPISODE_END: torch.zeros(num_envs, dtype=torch.bool)}, batch_size=[num_envs]))
    return replay


class Recorded:
    """A pseudocount that keeps what it is asked to count."""

    def __init__(self) -> None:
        self.calls = []

    def insert(self, index, x, action=None):
        self.calls.append((index, x, action))

    def counts(self, index):
        return torch.ones(index.shape)

    def scale(self):
        return None

    def __len__(self):
        return sum(len(index) for index, _, _ in self.calls)


@pytest.mark.parametrize("env_id", [THREE_ROOM, POINT_MAZE_S])
def test_extend_counts_the_written_entries_under_their_goal_and_action(env_id):
    space = goal_space(env_id)
    replay = CountedReplay(GoalReplayStorage(space, 2, 4), Recorded())
    obs = torch.nn.functional.one_hot(torch.tensor([3, 7]), space.obs_dim).float() if space.discrete \
        else torch.randn(2, space.obs_dim)
    action = torch.tensor([1, 2]) if space.discrete else torch.rand(2, 2)
    step = {keys.OBS: obs, keys.ACTION: action, keys.NEXT_OBS: obs,
            keys.TERMINATED: torch.zeros(2, dtype=torch.bool), keys.EPISODE_END: torch.zeros(2, dtype=torch.bool)}
    for expected in ([0, 1], [2, 3], [0, 1]):  # the third step evicts the first: the same positions again
        assert replay.extend(step).tolist() == expected
        index, x, goal_action = replay.pseudocount.calls[-1]
        assert index.tolist() == expected and torch.equal(x, space.project(obs))
        assert torch.equal(goal_action, action) if space.discrete else goal_action is None  # actions are goals there
    assert len(replay) == len(replay.storage) == 4


def test_scale_is_the_radius_pseudocounts_on_ds_device_and_none_for_exact_counts():
    assert filled_replay([1, 2], [0, 0]).scale() is None
    replay = point_replay(steps=5, capacity=40)
    scale = replay.scale()
    assert scale.device == replay.storage.device and torch.equal(scale, replay.pseudocount.scale())


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_a_checkpoint_restores_d_and_its_counts_into_the_same_objects(backend):
    replay = point_replay(steps=15, capacity=40, backend=backend)  # wrapped: 60 entries written
    again = point_replay(steps=0, capacity=40, backend=backend)
    storage, pseudocount = again.storage, again.pseudocount
    again.load_state_dict({**replay.state_dict(), "frames": 60})  # an exploration state's other keys are ignored
    assert again.storage is storage and again.pseudocount is pseudocount  # whoever holds them sees the restored ones
    held = torch.arange(40)
    assert torch.equal(again.counts(held), replay.counts(held)) and torch.equal(again.scale(), replay.scale())
    assert torch.equal(again.storage.get(held)[keys.OBS], replay.storage.get(held)[keys.OBS])
    # Both go on in step: the same next steps give the same counts.
    for r in (replay, again):
        r.extend(point_replay(steps=1, capacity=40, seed=1).storage.get(torch.arange(4)))
    assert torch.equal(again.counts(held), replay.counts(held))


def test_another_capacity_counts_d_again_as_it_was_collected():
    replay = point_replay(steps=10, capacity=40)  # not wrapped
    larger = point_replay(steps=0, capacity=80)
    larger.load_state_dict(replay.state_dict())
    held = torch.arange(40)
    assert len(larger.pseudocount) == 40 and torch.equal(larger.counts(held), replay.counts(held))
    wrapped = point_replay(steps=11, capacity=40)  # 44 entries written, 40 kept: their first counts are lost
    with pytest.raises(ValueError, match=r"wrapped \(44 entries written, the last 40 kept\): resume with the "
                                         r"data.capacity it was run with \(40\)"):
        point_replay(steps=0, capacity=80).load_state_dict(wrapped.state_dict())


def test_a_checkpoint_of_other_counts_is_refused():
    with pytest.raises(ValueError, match="checkpoint holds a TorchRadiusPseudocount, this run a RadiusPseudocount"):
        point_replay(steps=0, capacity=40, backend="native").load_state_dict(point_replay(1, 40).state_dict())
