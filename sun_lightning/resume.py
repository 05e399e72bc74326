"""What a checkpoint holds of exploration, so that ``--ckpt_path last`` continues a run exactly.

Lightning saves the learner (networks, targets, optimizers, counters); this module gives the
DataModule's part: the replay entries and their pseudocounts, each env's goal and selection
bookkeeping, the environments themselves (:mod:`sun_lightning.envs.state`), the collector's current
step, the frame counter and the window's statistics, the learning batches drawn but not trained on
yet (Lightning's loader prefetches one), and every RNG (torch, numpy, Python). A run
killed after a checkpoint and resumed from it ends with the metrics of the run never interrupted,
bit for bit where the env can be saved (every env of the package but LunarLander, whose Box2D world
cannot: its episodes in progress restart on resume).
"""

from __future__ import annotations

import pickle
import random
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from sun_lightning import keys, safe_pickle
from sun_lightning.envs.state import env_state, load_env_state


def rng_state() -> dict[str, Any]:
    """The global RNGs' states (torch CPU and CUDA, numpy, Python)."""
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": pickle.dumps(np.random.get_state()),
            "python": pickle.dumps(random.getstate())}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(safe_pickle.loads(state["numpy"]))
    random.setstate(safe_pickle.loads(state["python"]))


def restore_into(target: object, blob: bytes) -> None:
    """Replace ``target``'s attributes by those of a pickled object of its class (other objects keep their reference)."""
    loaded = safe_pickle.loads(blob)
    if type(loaded) is not type(target):
        raise ValueError(f"checkpoint holds a {type(loaded).__name__}, this run a {type(target).__name__}")
    vars(target).clear()
    vars(target).update(vars(loaded))


def recount(datamodule) -> None:
    """Insert D's entries into the (fresh) pseudocount one vector step at a time, as they were collected.

    Equal to the counts of the run that collected them as long as D never wrapped (the default capacity).
    """
    dm = datamodule
    storage, space, step = dm.storage, dm.goal_space, dm.storage.num_envs
    if storage.steps * step > storage.capacity:
        raise ValueError(f"data.capacity ({storage.capacity}) is smaller than the checkpoint's replay buffer "
                         f"({storage.steps * step} entries): resume with the capacity it was run with")
    for start in range(0, len(storage), step):
        index = torch.arange(start, start + step, device=storage.device)
        entries = storage.get(index)
        action = entries[keys.ACTION] if space.discrete else None
        dm.pseudocount.insert(index, space.project(entries[keys.OBS]), action)


def exploration_state(datamodule) -> dict[str, Any]:
    """The DataModule's state (see the module docstring) after its last recorded vector step.

    Under DDP (:mod:`sun_lightning.distributed`) D, its pseudocounts, the counters and the window are the
    same on every rank and saved once; each rank's own part (its envs, their goals, the collector's step,
    its untrained batches and RNGs) is gathered under ``ranks``, in rank order (a collective: every rank
    calls this, as Lightning's checkpointing does).
    """
    dm = datamodule
    own = {
        "transform": dm.transform.exploration_state(),
        "env": env_state(dm.vector_env),
        # TorchRL's collector state_dict holds its transforms' buffers and counters, not the step it carries
        # to the next iteration (observations and goals of the current states): saved here.
        "carrier": dm.collector._carrier.to_dict(),
        "untrained": [[(batch.to_dict(), tuple(batch.batch_size)) for batch in batches] for batches in dm.untrained],
        "rng": rng_state(),
    }
    if dm.world_size > 1:
        ranks = [None] * dm.world_size
        torch.distributed.all_gather_object(ranks, own)
        if dm.rank != 0:
            return {}  # Lightning writes rank 0's checkpoint only: the shared part is not copied here for nothing
        own = {"ranks": ranks}
    return {
        "world_size": dm.world_size,
        "frames": dm.frames,
        "credit": dm.credit,
        "storage": dm.storage.state_dict(),
        "pseudocount": pickle.dumps(dm.pseudocount),
        "policy_warmup": bool(dm.policy.warmup),
        "window": dict(vars(dm.window)),
        **own,
    }


def load_exploration_state(datamodule, state: dict[str, Any]) -> None:
    """Restore :func:`exploration_state` into a DataModule that ran ``setup`` with the same config.

    The RNG states are applied when the stream resumes (:meth:`ExplorationDataModule.stream`), after
    Lightning's loader has drawn its own seed, as it did before the uninterrupted run's first step.
    """
    dm = datamodule
    saved_world = state.get("world_size", 1)
    if saved_world != dm.world_size:
        raise ValueError(f"the checkpoint comes from a run of {saved_world} process(es), this one has {dm.world_size}: "
                         f"resume with --trainer.devices {saved_world} (each process's envs are in it)")
    own = state["ranks"][dm.rank] if dm.world_size > 1 else state
    dm.frames, dm.credit = state["frames"], state["credit"]
    dm.storage.load_state_dict(state["storage"])
    if state["storage"].get("capacity") == dm.storage.capacity:
        restore_into(dm.pseudocount, state["pseudocount"])
    else:  # a run extended with another capacity: count the stored entries again, in their order
        recount(dm)
    dm.transform.load_exploration_state(own["transform"])
    dm.policy.warmup = state["policy_warmup"]
    vars(dm.window).update(state["window"])
    dm.untrained.clear()
    for batches in own["untrained"]:
        dm.untrained.append([TensorDict(data, batch_size=size, device=dm.storage.device) for data, size in batches])
    if own["env"] is not None:
        load_env_state(dm.vector_env, own["env"])
        carrier = TensorDict(own["carrier"], batch_size=dm.collector._carrier.batch_size)
        dm.collector._carrier.update_(carrier.to(dm.collector._carrier.device))
    else:
        warnings.warn(f"{dm.env_id}'s state cannot be saved: its episodes in progress restart on resume", stacklevel=2)
        dm.collector.reset()
    dm.pending_rng = own["rng"]
