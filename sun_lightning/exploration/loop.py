"""The agent–environment loop (SPEC §9), one vector step at a time, in the order it happens::

    act and step       policy → vector env → goal selection transform (SPEC §3)     (the collector)
    record             → D, its pseudocounts (§4), window statistics, events        (recorder.record)
    end the warm-up    random actions until warmup_frames, then goals (§5d)
    owe updates        one per frame collected after the warm-up (updates_per_frame)
    draw the batches   relabelled batches for the updates owed (§5), one training step

:func:`collect` runs it up to the next vector step that owes updates; :mod:`~sun_lightning.exploration.prefetch`
calls it after each training step's update, and Lightning's training step runs the updates of the batches it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensordict import TensorDict

from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.recorder import record


@dataclass(frozen=True)
class Budget:
    """How long the loop runs and how much it learns: ``data``'s frame budget, warm-up and update ratio."""

    total_frames: int
    warmup_frames: int
    updates_per_frame: float
    learns: bool  # the rule learns (not Random) and updates_per_frame > 0


def whole_steps(total_frames: int, step: int) -> tuple[int, str | None]:
    """``total_frames`` rounded up to whole vector steps of ``step`` frames, and the note saying so where that changed
    it: the loop collects a vector step at a time, so a budget between two runs to the next one (and the progress bar
    counts to the frames the run will collect, not past its total)."""
    rounded = -(-total_frames // step) * step
    if rounded == total_frames:
        return total_frames, None
    return rounded, (f"note: data.total_frames ({total_frames}) is not a whole number of vector steps of {step} "
                     f"frames: the run collects {rounded} ({rounded // step} steps)")


def collect(x: Exploration, budget: Budget, should_stop: Callable[[], bool]) -> list[TensorDict] | None:
    """Step the collector until a vector step gives the learner a training step, and return its learning batches
    (one per update; an empty list where nothing learns, so that Lightning's batch-end hooks still run every step);
    ``None`` once ``budget.total_frames`` are collected or the run stops. Each step's events fire as it is recorded."""
    while x.frames < budget.total_frames and not should_stop():
        rollout = next(x.rollouts)  # [B, 1]: one vector step
        record(x, rollout[..., 0])
        if x.frames >= budget.warmup_frames:
            end_warmup(x)
            if budget.learns:
                updates = owe_updates(x, budget)
                if updates:
                    # One item per vector step (a Lightning training step): its updates share Lightning's
                    # per-step overhead and one draw of their batches.
                    return learning_batches(x, updates)
        if not budget.learns:
            # No updates (Random): an empty training step per vector step still runs Lightning's batch-end
            # hooks, so checkpoints are written on their period and at the end, and the run resumes.
            return []
    return None


def end_warmup(x: Exploration) -> None:
    """After the warm-up the policy acts on goals; one more step of random actions lets the transform draw goals
    first. (Set only on change: both are nn.Modules, whose attribute assignment walks their dicts.)"""
    warmup = not x.transform.active
    if x.policy.warmup != warmup:
        x.policy.warmup = warmup
    if warmup:
        x.transform.active = True


def owe_updates(x: Exploration, budget: Budget) -> int:
    """The updates this step earns: one per frame collected after the warm-up; under DDP each rank's updates are
    for its own envs' frames (a DDP update averages one batch per rank: as many samples per frame)."""
    fresh = min(x.config.num_envs * x.world_size, x.frames - budget.warmup_frames) / x.world_size
    x.credit += fresh * budget.updates_per_frame
    updates = int(x.credit)
    x.credit -= updates
    return updates


def learning_batches(x: Exploration, updates: int) -> list[TensorDict]:
    """The batches of ``updates`` updates, drawn at once; ensembles get one independent batch per member, stacked
    ``[E]``."""
    members = x.agent.batches_per_update
    batches = x.sampler.sample(x.storage, x.scale(), count=updates * members)
    if members > 1:
        batches = batches.unflatten(0, (updates, members))
    return list(batches.unbind(0))
