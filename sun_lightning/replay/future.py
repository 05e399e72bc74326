"""Relabelled batches of the TD3 variant: future goals along the trajectory and uniform goals (SPEC §5b).

Of each batch of ``batch_size`` entries drawn uniformly from D, a randomly chosen ``future_fraction``
get a goal from the next ``horizon`` steps of their own trajectory (stopping at the episode's end):
the goal projection of the state reached after k steps, k uniform in [1, L], L the steps left in the
window. Their TD(λ) target runs along that path; the path's intermediate steps feed only the target,
never the gradient. The others get a goal uniform in the goal-space bounds and a one-step target
(a path of one step). The paper's appendix "GCRL Control" (``subsec:td3_details``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sun_lightning import keys
from sun_lightning.replay.storage import GoalReplayStorage


class FutureGoalSampler:
    """Draws TD3 batches: rows ``[batch_size]`` with their goal and the path to it ``[batch_size, horizon]``.

    Args:
        batch_size: entries per batch (256).
        horizon: T_max, the longest path to a future goal (50).
        future_fraction: share of the batch relabelled with future goals (0.5); the rest get uniform goals.
    """

    steps_needed = 1

    def __init__(self, batch_size: int = 256, horizon: int = 50, future_fraction: float = 0.5) -> None:
        if batch_size <= 0 or horizon <= 0:
            raise ValueError(f"batch_size and horizon must be positive, got {batch_size} and {horizon}")
        if not 0.0 <= future_fraction <= 1.0:
            raise ValueError(f"future_fraction must be in [0, 1], got {future_fraction}")
        self.batch_size, self.horizon, self.future_fraction = batch_size, horizon, future_fraction
        self._bounds_on: dict = {}  # (space, device) -> bounds there: checked once, no copy or host read per batch

    def sample(self, storage: GoalReplayStorage, scale: torch.Tensor | None = None,
               generator: torch.Generator | None = None, count: int | None = None) -> TensorDict:
        """A batch, or ``count`` independent batches stacked ``[count]``.

        Keys, per row: OBS, ACTION (the entry's), GOAL, FUTURE (a future goal, else uniform); per row
        and path step ``[horizon]``: PATH_NEXT_OBS (the state each step led to), PATH_TERMINATED, PATH_VALID
        (the step lies on the path: steps 0 … k − 1). A row's goal is reached on its path's last step
        when FUTURE; a reward is the learner's reach rule applied to PATH_NEXT_OBS. With the ``radius`` reach
        rule, GOAL_SCALE holds ``scale`` (σ̃) on every row.
        """
        k = 1 if count is None else count
        if k <= 0:
            raise ValueError(f"count must be positive, got {count}")
        space, n, h, device = storage.space, self.batch_size, self.horizon, storage.device
        index = storage.sample_index((k, n), generator)
        path, stored = storage.following(index, h)
        steps = storage.get(path, (keys.NEXT_OBS, keys.TERMINATED, keys.EPISODE_END))
        ended = steps[keys.EPISODE_END] & stored
        # L: steps up to and including the first episode end, within the stored window.
        after_end = torch.cumsum(ended.long(), -1) - ended.long() > 0
        usable = stored & ~after_end
        length = usable.sum(-1)  # ≥ 1: the entry itself is stored
        u = torch.rand((k, n), generator=generator, device=device)
        future = torch.rand((k, n), generator=generator, device=device) < self.future_fraction
        cut = torch.minimum((u * length).long() + 1, length)  # k uniform in [1, L]
        cut = torch.where(future, cut, torch.ones_like(cut))
        reached = steps[keys.NEXT_OBS].gather(2, (cut - 1)[..., None, None].expand(k, n, 1, steps[keys.NEXT_OBS].shape[-1]))
        bounds = self._bounds_on.get((space, device))
        if bounds is None:
            bounds = self._bounds_on[(space, device)] = tuple(b.to(device) for b in self._bounds(space))
        low, high = bounds
        uniform = low + (high - low) * torch.rand((k, n, space.goal_dim), generator=generator, device=device)
        goal = torch.where(future.unsqueeze(-1), space.project(reached.squeeze(2)), uniform)
        start = storage.get(index, (keys.OBS, keys.ACTION))
        out = TensorDict({
            keys.OBS: start[keys.OBS], keys.ACTION: start[keys.ACTION], keys.GOAL: goal, keys.FUTURE: future,
            keys.PATH_NEXT_OBS: steps[keys.NEXT_OBS], keys.PATH_TERMINATED: steps[keys.TERMINATED],
            keys.PATH_VALID: torch.arange(h, device=device) < cut.unsqueeze(-1),
        }, batch_size=[k, n], device=device)
        if space.reach == "radius":  # the learner's reach rule standardizes by the pseudocount's σ̃
            if scale is None:
                raise ValueError("the 'radius' reach rule needs the pseudocount's standardization scale")
            out[keys.GOAL_SCALE] = scale.to(device=device, dtype=goal.dtype).expand(k, n, space.goal_dim)
        return out if count is not None else out[0]

    @staticmethod
    def _bounds(space) -> tuple[torch.Tensor, torch.Tensor]:
        """The goal-space bounds uniform goals are drawn in (the metric bounds where a side is unbounded)."""
        low = torch.tensor(space.low, dtype=torch.float32)
        high = torch.tensor(space.high, dtype=torch.float32)
        if space.metric_low:
            metric_low = torch.tensor(space.metric_low, dtype=torch.float32)
            metric_high = torch.tensor(space.metric_high, dtype=torch.float32)
            low = torch.where(low.isfinite(), low, metric_low)
            high = torch.where(high.isfinite(), high, metric_high)
        if low.numel() != space.goal_dim or not (low.isfinite() & high.isfinite()).all():
            raise ValueError("uniform goals need finite goal-space bounds (GoalSpace.low/high or metric bounds)")
        return low, high
