"""Test fixtures shared by several test files: a hand-made value table and a filled replay."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
import torch
from tensordict import TensorDict
from torchrl.envs import GymWrapper, TransformedEnv

import sun_lightning.envs  # noqa: F401
from sun_lightning import keys
from sun_lightning.envs.registry import goal_space
from sun_lightning.goals.transform import GoalSelectionTransform
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.exact_count import ExactCount
from sun_lightning.replay.storage import GoalReplayStorage

THREE_ROOM = "sun_lightning/ThreeRoom-v0"
#: The wall-clock metrics (the logging window's speed, the run's minutes and frames/s): all a repeat may change.
WALL_CLOCK = "perf/"


def final_metrics(cli) -> dict[str, float]:
    """A fitted run's final metrics (its exploration logger's), less the wall-clock ones."""
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    return {name: value for name, value in logger.final.items() if not name.startswith(WALL_CLOCK)}


class TableLearner:
    """Stand-in learner with V(s, g) = table[tile(s), tile(g)], whatever the goal action."""

    device = torch.device("cpu")

    def __init__(self, num_tiles: int) -> None:
        self.table = torch.zeros(num_tiles, num_tiles)

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        return self.table[obs.argmax(-1).unsqueeze(-1), goal.argmax(-1)], None


def one_hot(tiles, size: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.as_tensor(tiles), size).float()


def filled_replay(tiles: list[int], actions: list[int], env_id: str = THREE_ROOM, num_envs: int = 1,
                  capacity: int = 1000) -> CountedReplay:
    """A replay with its exact counts whose entries are the given (tile, action) pairs, written one vector step at a
    time."""
    space = goal_space(env_id)
    storage = GoalReplayStorage(space, num_envs, capacity)
    replay = CountedReplay(storage, ExactCount(space.obs_dim * space.num_actions, storage.capacity, space.num_actions))
    for start in range(0, len(tiles), num_envs):
        t = torch.tensor(tiles[start : start + num_envs])
        obs = one_hot(t, space.obs_dim)
        replay.extend(
            TensorDict(
                {
                    keys.OBS: obs,
                    keys.ACTION: torch.tensor(actions[start : start + num_envs]),
                    keys.NEXT_OBS: obs,
                    keys.TERMINATED: torch.zeros(num_envs, dtype=torch.bool),
                    keys.EPISODE_END: torch.zeros(num_envs, dtype=torch.bool),
                },
                batch_size=[num_envs],
            )
        )
    return replay


def goal_env(selector, replay, learner, num_envs: int, env_id: str = THREE_ROOM, seed: int = 0):
    """A TorchRL env of ``num_envs`` gridworlds with an active goal-selection transform, reset as the trainer's
    (explicit partial resets)."""
    vec = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    base = GymWrapper(vec, categorical_action_encoding=True)
    base.set_seed(seed)
    transform = GoalSelectionTransform(selector, replay, learner, num_envs)
    transform.active = True
    return TransformedEnv(base, transform), transform


def assert_disabled_draws_as_same_step(same, disabled, actions, seed: int = 3) -> int:
    """Same seed and actions: a DISABLED-autoreset vector env, reset by mask after each ended episode, sees what the
    SAME_STEP one does (its step observations are SAME_STEP's final ones, its resets SAME_STEP's reset ones).

    Returns the number of episodes that ended."""
    np.testing.assert_array_equal(same.reset(seed=seed)[0], disabled.reset(seed=seed)[0])
    resets = 0
    for action in actions:
        o1, _, te1, tr1, info = same.step(action)
        o2, _, te2, tr2, _ = disabled.step(action)
        np.testing.assert_array_equal(te1, te2)
        np.testing.assert_array_equal(tr1, tr2)
        ended = te2 | tr2
        if ended.any():
            resets += int(ended.sum())
            np.testing.assert_array_equal(np.stack(list(info["final_obs"][ended])), o2[ended])
            o2 = disabled.reset(options={"reset_mask": ended})[0]
        np.testing.assert_array_equal(o1, o2)
    return resets


def assert_single_env_follows(single, frames, actions, seed: int) -> None:
    """The single env (``gymnasium.make``) reset with ``seed`` and stepped with ``actions`` ``[T, action...]`` sees
    ``frames`` ``[T + 1, obs...]`` (a one-world vector env's trajectory), with no reward and no episode end."""
    obs, _ = single.reset(seed=seed)
    np.testing.assert_array_equal(obs, frames[0])
    for t, action in enumerate(actions):
        obs, reward, terminated, truncated, _ = single.step(action)
        np.testing.assert_array_equal(obs, frames[t + 1])
        assert reward == 0 and not terminated and not truncated


def write_run_checkpoint(path, env_id: str, learner=None, obs: torch.Tensor | None = None, frames: int = 1000,
                         method: str = "sun") -> None:
    """A run checkpoint as ``fit`` writes it, reduced to what the figures drawn from checkpoints read: the run's
    identity, its learner's class, arguments and weights (``learner``), and D's observations (``obs``)."""
    state = {"sun_run": {"env_id": env_id, "method": method, "seed": 0}}
    if learner is not None:
        cls = type(learner)
        state["hyper_parameters"] = {**learner.hparams, "_class_path": f"{cls.__module__}.{cls.__name__}",
                                     "_instantiator": "lightning.pytorch.cli.instantiate_module"}
        state["state_dict"] = learner.state_dict()
    columns = None if obs is None else {keys.OBS: obs, keys.ACTION: torch.zeros(len(obs), dtype=torch.long)}
    state["ExplorationDataModule"] = {"frames": frames, "storage": {"steps": 0, "capacity": 10, "columns": columns}}
    torch.save(state, path)
