"""The LightningDataModule of an exploration run (SPEC §9): the thin adapter between Lightning and
:mod:`sun_lightning.exploration`.

It holds the ``data`` config whole (:class:`~sun_lightning.exploration.config.DataConfig`, which checks its values)
and checks what needs the registries (``data.goal``, ``data.layout``, the id's goal space), builds the run's
:class:`~sun_lightning.exploration.handle.Exploration` in ``setup()`` (so checkpoints, DDP and ``--print_config`` never
see environments), installs the loop's :class:`~sun_lightning.exploration.prefetch.TrainingSteps` among the trainer's
callbacks and hands Lightning what it collects as its training data, and saves the exploration state with the
checkpoint under this class's name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace

import lightning.pytorch as pl
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

import sun_lightning.envs  # noqa: F401  (registers the environments)
from sun_lightning.envs.custom import custom_env
from sun_lightning.envs.gridworlds import register_layout
from sun_lightning.envs.registry import goal_space
from sun_lightning.exploration.build import build
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.events import Events
from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.loop import Budget, whole_steps
from sun_lightning.exploration.prefetch import TrainingSteps
from sun_lightning.exploration.state import exploration_state, load_exploration_state


class ExplorationDataModule(pl.LightningDataModule):
    """Environments, collector and replay storage of one exploration run.

    Its arguments are the fields of :class:`~sun_lightning.exploration.config.DataConfig` (the ``data`` keys), held
    whole in :attr:`config`.
    """

    def __init__(self, **config) -> None:
        super().__init__()
        self.config = DataConfig(**config)
        c = self.config
        self.custom = custom_env(c.env_id, c.goal, c.env_package, c.vector)  # checked, its goal space recorded
        if c.layout is not None:
            register_layout(c.env_id, c.layout)  # a map that cannot work fails here, naming the problem
        self.goal_space = goal_space(c.env_id)  # fails fast on an unknown id
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
        total_frames, note = whole_steps(self.config.total_frames, self.config.num_envs * self.trainer.world_size)
        if note:
            if self.trainer.is_global_zero:
                print(note, file=sys.stderr, flush=True)
            self.config = replace(self.config, total_frames=total_frames)  # a new value: the config stays frozen
        self.exploration = build(self.config, goal_space=self.goal_space, custom=self.custom, agent=learner,
                                 rank=self.trainer.global_rank, world_size=self.trainer.world_size,
                                 gather_device=strategy.root_device, events=self.events, device=learner.device)
        self.steps = TrainingSteps(self.exploration, self.budget)

    def teardown(self, stage: str) -> None:
        if self.exploration is not None:
            self.exploration.close()  # its storage and counters stay readable (the CLI's summary, tests)

    @property
    def budget(self) -> Budget:
        c = self.config
        return Budget(c.total_frames, c.warmup_frames, c.updates_per_frame, learns=c.learns)

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
