"""One run's exploration, as :func:`~sun_lightning.exploration.build.build` makes it: everything the loop steps and
a checkpoint saves (:mod:`~sun_lightning.exploration.state`), in one typed handle; callbacks read it through
:class:`~sun_lightning.exploration.view.RunView`, a narrow view of the same object."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.collectors import Collector
from torchrl.envs import TransformedEnv

from sun_lightning.envs.custom import CustomEnv
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.exploration.agent import Agent
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.events import Events
from sun_lightning.exploration.stats import CollectionStats
from sun_lightning.goals.transform import GoalSelectionTransform
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.counts import Pseudocount
from sun_lightning.replay.storage import GoalReplayStorage


@dataclass(eq=False)
class Exploration:
    """The environments, their goals, the replay storage D with its counts, and the run's counters.

    Under DDP (:mod:`sun_lightning.exploration.distributed`) D and its pseudocounts hold every rank's envs; each
    rank steps its own ``vector_env``.
    """

    config: DataConfig  # the run's ``data`` config (its ``num_envs``: this process's envs)
    goal_space: GoalSpace
    agent: Agent  # the learner, as the loop and the selection transform see it
    sampler: Any  # the learner's replay sampler (relabelled batches, SPEC §5)
    replay: CountedReplay  # D and the counts of its entries (SPEC §4), written together
    vector_env: Any  # the gymnasium vector env
    transform: GoalSelectionTransform
    env: TransformedEnv
    policy: Any  # the learner's acting policy (TensorDict in, action out)
    collector: Collector
    custom: CustomEnv | None = None  # a user's environment (data.goal), else None
    rank: int = 0
    world_size: int = 1
    gather_device: torch.device | None = None  # where ranks exchange their steps (DDP)
    run_seed: int = 0  # the run's seed (before the rank offset)
    env_seed: int = 0  # this rank's env seed
    events: Events = field(default_factory=Events)
    window: CollectionStats = field(default_factory=CollectionStats)  # the logging window's goal statistics
    frames: int = 0  # env frames of the whole job (every rank's under DDP)
    credit: float = 0.0  # fractional updates owed (updates_per_frame < 1 spreads them over steps)
    # The training steps collected and not trained yet, each its learning batches: a checkpoint written after an
    # update already holds the next one (exploration/prefetch.py says why); they are saved with it.
    untrained: deque[list[TensorDict]] = field(default_factory=deque)
    pending_rng: dict | None = None  # a checkpoint's RNG states, applied when the loop resumes (prefetch.py)
    rollouts: Iterator[TensorDictBase] = field(init=False, repr=False)
    closed: bool = field(default=False, init=False)  # the collector and envs are shut (the data stay readable)

    def __post_init__(self) -> None:
        self.rollouts = iter(self.collector)

    @property
    def storage(self) -> GoalReplayStorage:
        """The replay storage D (written through :attr:`replay` only)."""
        return self.replay.storage

    @property
    def pseudocount(self) -> Pseudocount:
        """The counts of D's entries (written through :attr:`replay` only)."""
        return self.replay.pseudocount

    def scale(self) -> torch.Tensor | None:
        """The radius pseudocount's goal standardization σ̃ (``None`` for exact counts)."""
        return self.replay.scale()

    def close(self) -> None:
        if not self.closed:
            self.collector.shutdown()
            self.closed = True
