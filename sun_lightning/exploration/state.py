"""What a checkpoint holds of exploration, so that ``--ckpt_path last`` continues a run exactly.

Lightning saves the learner (networks, targets, optimizers, counters); this module gives the
exploration's part (:func:`exploration_state`): the replay entries and their pseudocounts, each env's goal and
selection bookkeeping, the environments themselves (:mod:`sun_lightning.envs.state`), the collector's current
step, the frame counter and the window's statistics, the learning batches drawn but not trained on
yet (:mod:`~sun_lightning.exploration.prefetch`), and every RNG (torch, numpy, Python). A run
killed after a checkpoint and resumed from it ends with the metrics of the run never interrupted,
bit for bit where the env can be saved (every env of the package but LunarLander, whose Box2D world
cannot: its episodes in progress restart on resume).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from sun_lightning.checkpoints.rng import rng_state
from sun_lightning.envs.state import env_state, load_env_state

if TYPE_CHECKING:
    from sun_lightning.exploration.handle import Exploration


def carried_step(collector) -> TensorDict:
    """The step a TorchRL collector carries to its next iteration (the current states' observations and goals).

    TorchRL 0.14's ``Collector`` offers no public accessor for it (its ``state_dict`` holds the transforms' buffers
    and counters, not this step), so it is read and written here, and only here, through ``_carrier``.
    """
    return collector._carrier


def exploration_state(x: Exploration) -> dict[str, Any]:
    """The run's exploration state (see the module docstring) after its last recorded vector step.

    Under DDP (:mod:`sun_lightning.exploration.distributed`) D, its pseudocounts, the counters and the window are
    the same on every rank and saved once; each rank's own part (its envs, their goals, the collector's step,
    its untrained batches and RNGs) is gathered under ``ranks``, in rank order (a collective: every rank
    calls this, as Lightning's checkpointing does).
    """
    own = {
        "transform": x.transform.exploration_state(),
        "env": env_state(x.vector_env),
        "carrier": carried_step(x.collector).to_dict(),
        "untrained": [[(batch.to_dict(), tuple(batch.batch_size)) for batch in batches] for batches in x.untrained],
        "rng": rng_state(),
    }
    if x.world_size > 1:
        ranks = [None] * x.world_size
        torch.distributed.all_gather_object(ranks, own)
        if x.rank != 0:
            return {}  # Lightning writes rank 0's checkpoint only: the shared part is not copied here for nothing
        own = {"ranks": ranks}
    return {
        "world_size": x.world_size,
        "frames": x.frames,
        "credit": x.credit,
        **x.replay.state_dict(),  # "storage" and "pseudocount"
        "policy_warmup": bool(x.policy.warmup),
        "window": dict(vars(x.window)),
        **own,
    }


def load_exploration_state(x: Exploration, state: dict[str, Any]) -> None:
    """Restore :func:`exploration_state` into a run built with the same config.

    The RNG states are applied when the loop resumes (:meth:`~sun_lightning.exploration.prefetch.TrainingSteps.items`),
    after Lightning's loader has drawn its own seed, as it did before the uninterrupted run's first step.
    """
    saved_world = state.get("world_size", 1)
    if saved_world != x.world_size:
        raise ValueError(f"the checkpoint comes from a run of {saved_world} process(es), this one has {x.world_size}: "
                         f"resume with --trainer.devices {saved_world} (each process's envs are in it)")
    own = state["ranks"][x.rank] if x.world_size > 1 else state
    x.frames, x.credit = state["frames"], state["credit"]
    x.replay.load_state_dict(state)  # a run extended with another capacity counts D again
    x.transform.load_exploration_state(own["transform"])
    x.policy.warmup = state["policy_warmup"]
    vars(x.window).update(state["window"])
    x.untrained.clear()
    for batches in own["untrained"]:
        x.untrained.append([TensorDict(data, batch_size=size, device=x.storage.device) for data, size in batches])
    if own["env"] is not None:
        load_env_state(x.vector_env, own["env"])
        carrier = carried_step(x.collector)
        carrier.update_(TensorDict(own["carrier"], batch_size=carrier.batch_size).to(carrier.device))
    else:
        warnings.warn(f"{x.config.env_id}'s state cannot be saved: its episodes in progress restart on resume",
                      stacklevel=2)
        x.collector.reset()
    x.pending_rng = own["rng"]
