"""The LightningDataModule of an exploration run (SPEC §9): the thin adapter between Lightning and
:mod:`sun_lightning.exploration`.

It checks the ``data`` config, builds the run's :class:`~sun_lightning.exploration.handle.Exploration` in
``setup()`` (so checkpoints, DDP and ``--print_config`` never see environments), installs the loop's
:class:`~sun_lightning.exploration.prefetch.TrainingSteps` among the trainer's callbacks and hands Lightning what it
collects as its training data, and saves the exploration state with the checkpoint under this class's name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Literal

import lightning.pytorch as pl
import torch
from jsonargparse import lazy_instance
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

import sun_lightning.envs  # noqa: F401  (registers the environments)
from sun_lightning.domains import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, check_arguments
from sun_lightning.envconfig.goal import GoalConfig
from sun_lightning.envs.custom import custom_env
from sun_lightning.envs.gridworlds import register_layout
from sun_lightning.envs.registry import goal_space
from sun_lightning.errors import ConfigError
from sun_lightning.exploration.build import COUNTS, build
from sun_lightning.exploration.events import Events
from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.loop import Budget, whole_steps
from sun_lightning.exploration.prefetch import TrainingSteps
from sun_lightning.exploration.state import exploration_state, load_exploration_state
from sun_lightning.exploration.stats import CollectionStats
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.sun import SUNAdaptive
from sun_lightning.replay.pseudocount import BACKENDS


class ExplorationDataModule(pl.LightningDataModule):
    """Environments, collector and replay storage of one exploration run.

    Args:
        env_id: a registered id, e.g. ``sun_lightning/FourRoomStuck-v0``; with ``layout``, the id its gridworld
            gets (``sun_lightning/<Name>-v0``, not a built-in's).
        total_frames: env frames of the run (all envs of all processes together), warm-up included.
        num_envs: envs stepped together in one in-process vector env (per process under DDP).
        warmup_frames: frames of uniformly random actions before learning (SPEC §5d).
        capacity: replay entries kept (FIFO eviction beyond); ``None`` keeps everything.
        selector: the goal-selection rule (SPEC §3).
        updates_per_frame: learner updates per env frame (1 in the paper).
        sigma_every: inserts between re-standardizations of the radius pseudocount (SPEC §4).
        backend: the radius pseudocount's index: ``native`` (a C hash grid, built with the system
            C compiler), ``torch`` (brute force on the storage's device), or ``auto`` (native on
            CPU where it builds, torch otherwise, with a one-line warning).
        storage_device: where D and its pseudocounts live; ``None``: the learner's device.
        seed: environment seed; ``None`` derives it from ``seed_everything``.
        counts: what a goal's novelty counts: ``pseudo`` (the radius pseudocount of SPEC §4; exact (tile, action)
            counts on gridworlds) or ``binned`` (the paper's "true counts" ablation: exact counts of 50 bins per goal
            dimension over the metric bounds, per (bin, action) where actions are part of the goal,
            :class:`~sun_lightning.replay.binned_count.BinnedCount`; gridworlds keep their exact counts).
        rho: the pseudocount radius ρ, overriding the environment's (SPEC §4; the paper's ρ ablation); the reach
            rule keeps the environment's. ``None``: the environment's.
        layout: a gridworld's map in SPEC §6's symbols (``W`` wall, ``.`` free, ``Q`` random move, ``S`` start,
            ``G`` terminal, one line per row, tiles separated by spaces), checked and registered under ``env_id``
            (:func:`~sun_lightning.envconfig.layout.parse_layout`: 4 actions, horizon 200, ``G`` ends an episode
            on entry); ``None``: ``env_id`` is an environment of the package.
        goal: the goal space of ``env_id`` as any id :func:`gymnasium.make` knows (
            :class:`~sun_lightning.envs.custom.GoalConfig`, docs/custom-envs.md); ``None``: a registered id.
        env_package: a module imported first (your package's ``gymnasium.register`` calls).
        vector: with ``goal``, gymnasium's ``sync`` (in-process) or ``async`` (a process per env) vector env.
    """

    def __init__(
        self,
        env_id: str,
        total_frames: PositiveInt = 100_000,
        num_envs: PositiveInt = 4,
        warmup_frames: NonNegativeInt = 10_000,
        capacity: PositiveInt | None = None,
        selector: GoalSelector = lazy_instance(SUNAdaptive),
        updates_per_frame: NonNegativeFloat = 1.0,
        sigma_every: PositiveInt = 1000,
        backend: Literal["auto", "native", "torch"] = "auto",
        storage_device: str | None = None,
        seed: int | None = None,
        layout: str | None = None,
        counts: Literal["pseudo", "binned"] = "pseudo",
        rho: PositiveFloat | None = None,
        goal: GoalConfig | None = None,
        env_package: str | None = None,
        vector: Literal["sync", "async"] = "sync",
    ) -> None:
        super().__init__()
        self.custom = custom_env(env_id, goal, env_package, vector)  # checked, its goal space recorded
        check_arguments(ExplorationDataModule, locals(), "data.")  # the annotated domains
        if layout is not None:
            register_layout(env_id, layout)  # a map that cannot work fails here, naming the problem
        self.goal_space = goal_space(env_id)  # fails fast on an unknown id
        if counts not in COUNTS:
            raise ConfigError(f"data.counts must be one of {', '.join(COUNTS)}, got {counts!r}")
        if backend not in BACKENDS:
            raise ConfigError(f"data.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if selector.learns and updates_per_frame > 0 and total_frames <= warmup_frames:
            raise ConfigError(f"data.total_frames ({total_frames}) must exceed data.warmup_frames ({warmup_frames}): "
                              "learning starts after the warm-up, so this run would learn nothing (raise "
                              "total_frames or lower warmup_frames)")
        self.env_id, self.total_frames, self.num_envs = env_id, total_frames, num_envs
        self.warmup_frames, self.capacity, self.selector = warmup_frames, capacity, selector
        self.updates_per_frame, self.sigma_every, self.seed = updates_per_frame, sigma_every, seed
        self.backend, self.storage_device, self.layout = backend, storage_device, layout
        self.counts, self.rho = counts, rho
        #: What the loop announces (``trained``, ``goals``, ``frames``): callbacks subscribe in their ``setup``.
        self.events = Events()
        self.exploration: Exploration | None = None  # built in setup; after teardown closed, still readable
        self.steps: TrainingSteps | None = None  # the loop's side of Lightning's training steps, made in setup

    def setup(self, stage: str) -> None:
        if self.exploration is None or self.exploration.closed:
            self._build()
        # Last among the callbacks (again on every fit: Lightning moves its checkpoint callbacks to the end when a fit
        # starts), so that the others' batch-end hooks see a training step before the loop steps the env on.
        callbacks = self.trainer.callbacks
        callbacks[:] = [callback for callback in callbacks if not isinstance(callback, TrainingSteps)] + [self.steps]

    def _build(self) -> None:
        learner, strategy = self.trainer.lightning_module, self.trainer.strategy
        self.total_frames, note = whole_steps(self.total_frames, self.num_envs * self.trainer.world_size)
        if note and self.trainer.is_global_zero:
            print(note, file=sys.stderr, flush=True)
        self.exploration = build(
            env_id=self.env_id, goal_space=self.goal_space, custom=self.custom, selector=self.selector,
            agent=learner, num_envs=self.num_envs, total_frames=self.total_frames, warmup_frames=self.warmup_frames,
            capacity=self.capacity, sigma_every=self.sigma_every, backend=self.backend, counts=self.counts,
            rho=self.rho, storage_device=self.storage_device, seed=self.seed, rank=self.trainer.global_rank,
            world_size=self.trainer.world_size, gather_device=strategy.root_device, events=self.events,
            device=learner.device)
        self.steps = TrainingSteps(self.exploration, self.budget)

    def teardown(self, stage: str) -> None:
        if self.exploration is not None:
            self.exploration.close()  # its storage and counters stay readable (the CLI's summary, tests)

    @property
    def budget(self) -> Budget:
        return Budget(self.total_frames, self.warmup_frames, self.updates_per_frame,
                      learns=self.selector.learns and self.updates_per_frame > 0)

    # ---- what callbacks read (their view: exploration/view.py's RunView) ------------------------
    @property
    def frames(self) -> int:
        """Env frames of the whole job so far (every rank's under DDP)."""
        return self.exploration.frames if self.exploration is not None else 0

    @property
    def storage(self):
        """The replay storage D."""
        return self.exploration.storage

    @property
    def pseudocount(self):
        """The counts of D's entries (SPEC §4)."""
        return self.exploration.pseudocount

    @property
    def window(self) -> CollectionStats:
        """The logging window's goal statistics."""
        return self.exploration.stats

    @property
    def run_seed(self) -> int:
        return self.exploration.run_seed

    def scale(self) -> torch.Tensor | None:
        """The radius pseudocount's goal standardization σ̃ (``None`` for exact counts)."""
        return self.exploration.scale()

    # ---- Lightning's data ----------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        # Batches are whole TensorDicts already: no re-batching, no conversion.
        return DataLoader(_Stream(self), batch_size=None, num_workers=0, collate_fn=_identity)

    def stream(self) -> Iterator[list[TensorDict]]:
        """The run's learning batches as the loop collects them (:mod:`~sun_lightning.exploration.prefetch`); at their
        end the trainer stops, whatever Lightning's epoch count (a resumed run may have restored a finished epoch)."""
        yield from self.steps.items()
        if self.trainer is not None:
            self.trainer.should_stop = True

    def transfer_batch_to_device(self, batch: list[TensorDict], device: torch.device, dataloader_idx: int) -> list[TensorDict]:
        """Move the learning batches to the learner's device, unless they are there already (D lives there)."""
        if all(td.device == device for td in batch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The exploration state a checkpoint holds (:mod:`sun_lightning.exploration.state`); empty before ``setup``."""
        return exploration_state(self.exploration) if self.exploration is not None and not self.exploration.closed else {}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict:
            load_exploration_state(self.exploration, state_dict)


class _Stream(IterableDataset):
    def __init__(self, datamodule: ExplorationDataModule) -> None:
        self.datamodule = datamodule

    def __iter__(self) -> Iterator[list[TensorDict]]:
        return self.datamodule.stream()


def _identity(batch: list[TensorDict]) -> list[TensorDict]:
    return batch
