"""What a learner must provide: the one seam between the agent–environment loop and learning (SPEC §9).

A learner is a LightningModule that owns its networks, losses and optimizers only; the environments, the
collector and the replay storage are the exploration run's (:mod:`sun_lightning.exploration`, which Lightning
sees through its thin DataModule). The loop reaches a learner through the narrow
:class:`~sun_lightning.exploration.agent.Agent` protocol, never by class name, so the DQN variant (SPEC §5a),
the TD3 variant (§5b) and their 4-critic ensembles are interchangeable:

* :meth:`Learner.goal_values` — V(s, g) of candidate goals, which the goal selection transform scores (§3);
* :meth:`Learner.make_policy` — the acting policy the collector runs (§1);
* :meth:`Learner.make_sampler` — the relabelled batches it learns from (§5), and
  :attr:`Learner.batches_per_update` of them per update;
* :meth:`Learner.observe` — every collected step, for running statistics (§5c).

Lightning then hands each collected vector step's batches to :meth:`Learner.training_step`, which runs one
:meth:`Learner.update` per batch.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

import lightning.pytorch as pl
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from lightning.pytorch.utilities.parsing import collect_init_args

from sun_lightning.domains import check_arguments
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.errors import NonFiniteLossError
from sun_lightning.replay.storage import GoalReplayStorage


@contextmanager
def frozen(module: torch.nn.Module) -> Iterator[None]:
    """``module``'s parameters do not require gradients inside the block (a loss that holds it fixed)."""
    params = [param for param in module.parameters() if param.requires_grad]
    for param in params:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param in params:
            param.requires_grad_(True)


class BatchSampler(Protocol):
    """Draws relabelled learning batches from the replay storage (a learner's hindsight relabelling)."""

    #: Steps per env that D must hold before the first draw (the warm-up must cover them).
    steps_needed: int

    def sample(self, storage: GoalReplayStorage, scale: torch.Tensor | None = None,
               generator: torch.Generator | None = None, count: int | None = None) -> TensorDict:
        """One batch, or ``count`` independent batches stacked ``[count]``.

        Args:
            storage: the replay storage D.
            scale: the pseudocount's goal standardization σ̃ (the ``"radius"`` reach rule needs it).
            generator: random generator (torch's global one by default).
            count: number of batches; ``None`` for one without the leading dimension.
        """


class ActingPolicy(TensorDictModuleBase):
    """The collector's policy: reads ``observation``, ``goal`` (and the goal transform's keys), writes ``action``.

    While :attr:`warmup` is set it acts uniformly at random (the warm-up of SPEC §5d); the exploration loop
    clears it when the warm-up ends.
    """

    warmup: bool = True


class Learner(pl.LightningModule):
    """Base class of successor-value-function learners (see the module docstring).

    Subclasses implement :meth:`goal_values`, :meth:`make_policy`, :meth:`make_sampler`,
    :meth:`update` and ``configure_optimizers``. Optimization is manual: one
    Lightning training step is one collected vector step, whose batches each
    get one :meth:`update`.

    Args:
        goal_space: the environment's goal space (dimensions, action set,
            bounds); the CLI links it from the ``data`` config's environment, so a
            learner never needs to know which environment it trains on (hence
            optional in the signature).
    """

    #: Relabelled batches one update consumes, stacked along a leading axis (ensembles: one per member).
    batches_per_update: int = 1
    #: Whether a backward pass of :meth:`update` leaves some parameters out (one optimizer's at a time, as
    #: TD3's critic and actor steps): DDP must then find the unused ones (``fit --trainer.strategy ddp``).
    ddp_find_unused_parameters: bool = False

    def __init__(self, goal_space: GoalSpace | None = None) -> None:
        super().__init__()
        if goal_space is None:
            raise ValueError("goal_space is required (the CLI links it from data.env_id)")
        # Every subclass constructor's arguments against their annotated domains, read from the
        # calling frames as save_hyperparameters reads them: no learner keeps a list of its own checks.
        arguments: dict = {}
        for level in collect_init_args(inspect.currentframe().f_back, []):
            arguments.update(level)
        check_arguments(type(self), arguments)
        self.goal_space = goal_space
        self.automatic_optimization = False
        self.updates = 0  # learner updates, counted here: global_step counts optimizer steps
        self._unchecked: list[tuple[str, int, torch.Tensor]] = []  # losses whose finiteness is read later (CUDA)

    def inference_context(self) -> AbstractContextManager:
        """The trainer's precision context (bf16 autocast under ``--trainer.precision bf16-mixed``), for the
        evaluations outside ``training_step``: acting and goal selection (:mod:`sun_lightning.learners.precision`)."""
        trainer = self._trainer
        return nullcontext() if trainer is None else trainer.precision_plugin.forward_context()

    def check_goal(self, goal: torch.Tensor) -> None:
        """Raise a ValueError naming the shape of a goal ``[..., goal_dim]`` that does not fit the goal space."""
        if goal.shape[-1:] != (self.goal_space.goal_dim,):
            raise ValueError(f"goal of shape {tuple(goal.shape)}: the goal space has {self.goal_space.goal_dim} "
                             f"dimensions (goal_dims {self.goal_space.goal_dims})")

    # ---- what data collection reads ---------------------------------------------------
    def observe(self, obs: torch.Tensor) -> None:
        """Called with every collected vector step's observations ``[B, obs_dim]`` (running statistics)."""

    def goal_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(s, g) of K candidate goals per state, and the acting values towards each.

        Args:
            obs: states ``[B, obs_dim]``.
            goal: candidate goal projections ``[B, K, goal_dim]``.
            goal_action: candidate goal actions ``[B, K]`` (discrete spaces), else ``None``.
            goal_keys: ``[B, K]`` integers equal exactly where the candidates' goal projections are
                (the storage's tiles on exact spaces), or ``None``; a learner may use them to
                evaluate each distinct goal once.

        Returns:
            ``values`` ``[B, K]`` (``[E, B, K]`` for an ensemble of E critics) and, where the
            policy acts on values the same evaluation gives (discrete actions), the values of
            every action towards each candidate ``[B, K, |A|]``; else ``None``.
        """
        raise NotImplementedError

    def make_policy(self, uses_goals: bool = True) -> ActingPolicy:
        """The acting policy of the collector (ε-greedy on Q, or actor + noise).

        Args:
            uses_goals: False for rules that never pursue goals (Random): act uniformly at random.
        """
        raise NotImplementedError

    def make_sampler(self) -> BatchSampler:
        """The relabelling sampler whose batches :meth:`update` takes."""
        raise NotImplementedError

    # ---- learning ---------------------------------------------------------------------
    def update(self, batch: TensorDictBase) -> None:
        """One learner update on ``batch`` (``[batches_per_update]`` stacked for ensembles)."""
        raise NotImplementedError

    def training_step(self, batches: list[TensorDictBase], batch_idx: int) -> None:
        """The updates of one collected vector step, one per batch (:func:`~sun_lightning.exploration.loop.collect`;
        the envs step on after them: :mod:`sun_lightning.exploration.prefetch`)."""
        for batch in batches:
            self.update(batch)
        self.flush_finite_checks()

    def pop_train_metrics(self) -> dict[str, float]:
        """Means of the training statistics since the last call (``train/...`` names)."""
        return {}

    def check_finite(self, term: str, loss: torch.Tensor, update: int | None = None) -> None:
        """Stop with :class:`~sun_lightning.errors.NonFiniteLossError` before a NaN/inf ``loss`` reaches the networks.

        Called before every gradient step. On the CPU (and under DDP) the loss is read at once: one host
        read per loss, nothing next to an update's cost. On an accelerator a read per loss would stall the
        device queue every update, so the losses of a training step are read together at its end
        (:meth:`flush_finite_checks`): the run then stops after that step, with the bad update applied.

        Args:
            update: the update the loss belongs to, as the error names it (default: :attr:`updates`).
        """
        trainer = self._trainer
        distributed = trainer is not None and getattr(trainer, "world_size", 1) > 1
        if self.defers_checks(loss.device) and not distributed:
            self._unchecked.append((term, self.updates if update is None else update, loss.detach()))
            return
        value = float(loss.detach())
        if distributed:
            # Under DDP every rank must stop at the same update, or the others wait in the next all-reduce.
            strategy = trainer.strategy
            bad = torch.tensor([0.0 if math.isfinite(value) else 1.0], device=strategy.root_device)
            if float(strategy.reduce(bad, reduce_op="sum")) > 0 and math.isfinite(value):
                value = math.nan  # another rank's loss (each rank's message names the same update)
        if not math.isfinite(value):
            raise NonFiniteLossError(term, value, self.updates if update is None else update)

    @staticmethod
    def defers_checks(device: torch.device) -> bool:
        """Whether :meth:`check_finite` reads losses once per training step (accelerators) rather than at once."""
        return device.type != "cpu"

    def flush_finite_checks(self) -> None:
        """Read the losses :meth:`check_finite` deferred (one host read for all), raising on the first non-finite one."""
        if not self._unchecked:
            return
        pending, self._unchecked = self._unchecked, []
        values = torch.stack([loss.float().reshape(()) for _, _, loss in pending]).tolist()
        for (term, update, _), value in zip(pending, values):
            if not math.isfinite(value):
                raise NonFiniteLossError(term, value, update, applied=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sun_updates"] = self.updates
        # The logging window's running sums: a resumed run logs the same means at the same frames.
        checkpoint["sun_train_stats"] = {name: value.state_dict() for name, value in vars(self).items()
                                         if isinstance(value, TrainStats)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.updates = checkpoint.get("sun_updates", 0)
        for name, state in checkpoint.get("sun_train_stats", {}).items():
            getattr(self, name).load_state_dict(state)


class TrainStats:
    """Running sums of an update's statistics (a detached vector per update), averaged on :meth:`pop`.

    Args:
        names: the statistics' metric names, in the order of the vectors.
    """

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._sum: torch.Tensor | None = None
        self._count = 0

    def add(self, stats: torch.Tensor) -> None:
        stats = stats.detach()
        if self._sum is None:
            self._sum = stats.clone()
        else:
            if self._sum.device != stats.device:  # sums from a checkpoint load on the CPU; a GPU run adds on its GPU
                self._sum = self._sum.to(stats.device)
            self._sum.add_(stats)
        self._count += 1

    def state_dict(self) -> dict:
        return {"sum": None if self._sum is None else self._sum.clone(), "count": self._count}

    def load_state_dict(self, state: dict) -> None:
        self._sum, self._count = state["sum"], state["count"]

    def pop(self) -> dict[str, float]:
        """Means since the last pop (empty if no update ran), then start afresh."""
        if not self._count:
            return {}
        out = {name: value / self._count for name, value in zip(self.names, self._sum.tolist())}
        self._sum, self._count = None, 0
        return out
