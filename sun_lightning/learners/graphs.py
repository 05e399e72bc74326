"""A learner's update as CUDA graphs: captured once, replayed with each batch copied into static buffers.

On a GPU the TD3 update at the paper's sizes is launch-bound: a few hundred small kernels whose
arithmetic takes tens of microseconds, each paying the host's launch cost. A CUDA graph records them
once and replays them in one launch. What varies between updates on the host — TD3's actor step every
``policy_delay`` updates, the targets' Polyak steps every ``target_every`` — is the update's *plan*; one
graph is captured per plan (two with the paper's settings), so nothing inside a graph branches on the host.

Each plan's graph follows PyTorch's whole-network capture recipe (``torch.cuda.graphs``): ``warmup``
eager calls on a side stream (the optimizers' state and the libraries' workspaces allocated outside the
graph), the capture, then replays that copy the batch into the captured input's buffers (device copies in
stream order: no host read). Every call is one real update — a capture records without running, so it
follows an eager call on the same batch — and a run with graphs takes the same updates as one without.
tensordict's ``CudaGraphModule`` does the same but synchronizes the device before every replay.

A learner writes its update once, as ``update_step(batch, plan, stepping)``: the same steps run eagerly through
Lightning or inside a graph, and :class:`Stepping` is what differs between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase

from sun_lightning.errors import ConfigError

#: Eager calls of each plan before its capture (PyTorch's whole-network capture example warms up 3).
WARMUP = 3


class CapturedStep:
    """``step`` (a function of one batch returning a TensorDict of detached tensors) as one CUDA graph,
    captured after ``warmup`` eager calls and replayed after.

    Args:
        step: the function; it must read no host value and allocate the same shapes on every call.
        warmup: eager calls before the capture (the last of them immediately precedes it).
    """

    def __init__(self, step: Callable[[TensorDictBase], TensorDictBase], warmup: int = WARMUP) -> None:
        self.step, self.warmup, self.calls = step, warmup, 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_in: TensorDictBase | None = None
        self.static_out: TensorDictBase | None = None
        self.stream = torch.cuda.Stream()

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if self.graph is not None:
            self.static_in.update_(batch)
            self.graph.replay()
            return self.static_out.clone()
        self.calls += 1
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            out = self.step(batch)
        torch.cuda.current_stream().wait_stream(self.stream)
        if self.calls >= self.warmup:
            self.static_in = batch.clone()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.static_out = self.step(self.static_in)
            self.graph = graph
        return out


def capture(step: Callable[[TensorDictBase], TensorDictBase], warmup: int = WARMUP) -> CapturedStep:
    """The default way :class:`UpdateGraphs` captures a plan's step."""
    return CapturedStep(step, warmup)


class UpdateGraphs:
    """One captured update per plan.

    Args:
        step: ``step(batch, plan) -> {name: tensor}``, the update with the plan's steps, reading no host
            values (detached outputs only).
        factory: how a plan's step is captured (:func:`capture`; a test may pass an eager stand-in).
    """

    def __init__(self, step: Callable[[TensorDictBase, Hashable], dict[str, torch.Tensor]],
                 factory: Callable[[Callable], Callable] = capture) -> None:
        self.step, self.factory = step, factory
        self.graphs: dict[Hashable, Callable] = {}

    def __call__(self, batch: TensorDictBase, plan: Hashable) -> TensorDictBase:
        graph = self.graphs.get(plan)
        if graph is None:
            def one(static: TensorDictBase, plan: Hashable = plan) -> TensorDictBase:
                return TensorDict(self.step(static, plan), batch_size=[])

            graph = self.graphs[plan] = self.factory(one)
        return graph(batch)


class Stepping(NamedTuple):
    """How an update takes its gradient steps: the same steps, eagerly or inside a captured graph.

    Eager (:meth:`eager`): through Lightning (its optimizer wrappers count ``global_step``,
    ``manual_backward`` applies the precision plugin and DDP), each loss checked finite before its step.
    Captured (:meth:`captured`): the bare optimizers and ``Tensor.backward``, nothing read on the host; the
    learner checks the replayed losses and counts the steps after the replay (:func:`count_optimizer_steps`).
    """

    optimizers: list  #: the learner's optimizers, in ``configure_optimizers``'s order
    backward: Callable[[torch.Tensor], None]
    #: ``check(term, loss, update)`` before a step (:meth:`~sun_lightning.learners.base.Learner.check_finite`)
    check: Callable[[str, torch.Tensor, int], None]

    @classmethod
    def eager(cls, learner) -> Stepping:
        return cls(_as_list(learner.optimizers()), learner.manual_backward, learner.check_finite)

    @classmethod
    def captured(cls, learner) -> Stepping:
        bare = [getattr(optimizer, "optimizer", optimizer) for optimizer in _as_list(learner.optimizers())]
        return cls(bare, torch.Tensor.backward, _after_the_replay)


def _as_list(optimizers) -> list:
    """``LightningModule.optimizers()``'s answer as a list (it returns a lone optimizer bare)."""
    return list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]


def _after_the_replay(term: str, loss: torch.Tensor, update: int) -> None:
    """A captured step checks nothing: a check reads the host, which a graph cannot."""


def graph_blockers(learner, device: torch.device) -> list[str]:
    """Why ``learner``'s update cannot be captured on ``device`` (empty when it can): what every learner shares."""
    reasons = []
    if device.type != "cuda":
        reasons.append(f"the learner is on {device.type}, not a CUDA device")
    trainer = learner._trainer
    if trainer is not None and getattr(trainer, "world_size", 1) > 1:
        reasons.append("DDP all-reduces the gradients from hooks inside backward")
    if trainer is not None and getattr(trainer.precision_plugin, "scaler", None) is not None:
        reasons.append("16-mixed's gradient scaler reads the gradients on the host")
    return reasons


def uses_graphs(setting: bool | str, blockers: list[str]) -> bool:
    """Whether the update is captured: ``auto`` where nothing blocks it; ``True`` insists (a ValueError naming
    what blocks it); ``False`` never."""
    if setting is False or setting == "false":
        return False
    if setting == "auto":
        return not blockers
    if setting is True or setting == "true":
        if blockers:
            raise ConfigError("model.init_args.cuda_graph=true, but the update cannot be captured: " + "; ".join(blockers))
        return True
    raise ConfigError(f"model.init_args.cuda_graph must be 'auto', true or false, got {setting!r}")


def count_optimizer_steps(optimizers: list) -> None:
    """Tell Lightning about optimizer steps taken inside a replayed graph (its ``global_step`` counts them,
    as it counts the steps of :class:`~lightning.pytorch.core.optimizer.LightningOptimizer`)."""
    for optimizer in optimizers:
        before, after = getattr(optimizer, "_on_before_step", None), getattr(optimizer, "_on_after_step", None)
        if before is not None and after is not None:
            before()
            after()
