"""Why the loop runs after the update, and the bookkeeping Lightning's prefetch asks for (SPEC §9).

Lightning's training loop fetches the batch of the next training step before it runs the current one (its
``_PrefetchDataFetcher``, one batch ahead for a loader without a length). Were the env stepped inside that fetch,
a step's events (logging windows, evaluation, heatmaps, the warm-up's Ctrl-C checkpoint) would fire from inside
Lightning's data loading, before the update in flight. Here the loader only hands out what was collected already,
and the loop runs in :meth:`TrainingSteps.on_train_batch_end`, after the update of the training step that ends::

    training step k      the learner's updates on the batches of item k              (learners/base.py)
    after its update     ``trained``: a checkpoint due, Ctrl-C (not after a placeholder) (callbacks/checkpoint.py)
                         the env steps up to the next one that owes updates, each
                         with its ``goals`` and ``frames`` events → item k + 2        (loop.collect)

Lightning then trains item k + 1 (fetched before step k) and fetches item k + 2. A step's batches are thus trained
two training steps after it, and it acts with the networks of two items before: the order in which the env was
stepped inside the prefetching fetch, so a run's numbers are those of that order, bit for bit.

What that takes, all here:

- the first items of a session are empty placeholders (:data:`LEAD`), fetched before any update has ended; a
  resumed session has one, then the item its checkpoint had collected but not trained (the checkpoint is written
  after an update and before the collection that follows it, which the placeholder's step then makes);
- ``Exploration.untrained`` holds the items collected and not trained yet, which a checkpoint saves; an item
  leaves it when its training step starts (one whose update fails is not trained again on resume);
- the loop goes on only where Lightning will ask for another batch (:func:`continues`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import lightning.pytorch as pl
from tensordict import TensorDict

from sun_lightning.checkpoints.rng import set_rng_state
from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.loop import Budget, collect

#: Items Lightning fetches before the first update of a session ends: the one it trains first and the one it
#: prefetches.
LEAD = 2


def continues(trainer: pl.Trainer) -> bool:
    """Whether Lightning asks for another batch after the training step that ends: not once it stops (a
    callback's ``should_stop``, SIGTERM, ``max_steps`` reached)."""
    if trainer.should_stop or trainer.received_sigterm:
        return False
    return trainer.max_steps == -1 or trainer.global_step < trainer.max_steps


class TrainingSteps(pl.Callback):
    """The loop's side of Lightning's training steps: what the loader yields, what is trained, and the loop run
    after each update. :class:`~sun_lightning.exploration.datamodule.ExplorationDataModule` installs it last among
    the trainer's callbacks, so that the others' batch-end hooks see the step before the loop goes on."""

    def __init__(self, x: Exploration, budget: Budget) -> None:
        self.x, self.budget = x, budget
        self._ready: deque[list[TensorDict]] = deque()  # collected, not handed to Lightning yet
        self._placeholders = 0  # placeholders handed out whose training step has not started
        self._placeholder = False  # the training step running trains a placeholder

    def items(self) -> Iterator[list[TensorDict]]:
        """What Lightning's loader yields in one session: the placeholders, then each item as it is collected."""
        x = self.x
        if x.pending_rng is not None:
            # Resuming (exploration/state.py): after Lightning's loader drew its seed, as the uninterrupted run did.
            set_rng_state(x.pending_rng)
            x.pending_rng = None
        self._ready = deque(x.untrained)
        self._placeholders = max(0, LEAD - len(self._ready))
        for _ in range(self._placeholders):
            yield []
        while self._ready:
            yield self._ready.popleft()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        # Lightning trains the items in the order they were yielded: the placeholders first.
        self._placeholder = self._placeholders > 0
        if self._placeholder:
            self._placeholders -= 1
        else:
            self.x.untrained.popleft()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args, **kwargs) -> None:
        x = self.x
        if not self._placeholder:  # a placeholder's step trained nothing (no checkpoint is due after it)
            x.events.emit("trained", x.frames)
        if not continues(trainer):
            return
        item = collect(x, self.budget, lambda: trainer.should_stop)
        if item is not None:
            x.untrained.append(item)
            self._ready.append(item)
