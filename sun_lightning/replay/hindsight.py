"""Segmented-future hindsight relabelling batches of the DQN variant (SPEC §5a).

One batch: ``num_sequences`` runs of ``length`` consecutive steps; each run is
relabelled ``relabels`` times with the segmented future strategy (all
positives) and, per relabelling, paired once with a goal drawn uniformly from
D (negatives): 16 × 16 × 4 × 2 = 2048 rows with the paper's sizes.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sun_lightning import keys
from sun_lightning.goals.reach import goal_reached
from sun_lightning.losses.relabel import sample_segment_goal_index
from sun_lightning.replay.storage import GoalReplayStorage


class SegmentedHindsightSampler:
    """Draws relabelled learning batches ``[groups, length]`` from a :class:`GoalReplayStorage`.

    Args:
        num_sequences: runs sampled per batch (16).
        length: steps per run, the TD(λ) horizon T (16).
        relabels: segmented-future relabellings per run (4).
        negatives: also pair each relabelling with a random goal from D.
    """

    def __init__(self, num_sequences: int = 16, length: int = 16, relabels: int = 4, negatives: bool = True) -> None:
        for name, value in (("num_sequences", num_sequences), ("length", length), ("relabels", relabels)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.num_sequences, self.length, self.relabels, self.negatives = num_sequences, length, relabels, negatives

    @property
    def rows(self) -> int:
        return self.num_sequences * self.length * self.relabels * (2 if self.negatives else 1)

    def sample(self, storage: GoalReplayStorage, scale: torch.Tensor | None = None, generator: torch.Generator | None = None) -> TensorDict:
        """A relabelled batch with keys OBS, NEXT_OBS, ACTION, GOAL, GOAL_ACTION, REWARD, TERMINATED, EPISODE_END.

        Args:
            storage: the replay storage.
            scale: goal standardization σ̃ for the ``"radius"`` reach rule.
            generator: random generator (defaults to torch's global one).
        """
        space, s, t, r = storage.space, self.num_sequences, self.length, self.relabels
        seq = storage.get(storage.sequence_index(s, t, generator))
        achieved = space.project(seq[keys.OBS])
        action = seq[keys.ACTION]
        end = seq[keys.EPISODE_END]

        cut = sample_segment_goal_index(end.repeat_interleave(r, 0), generator).view(s, r, t)
        goal = torch.gather(achieved.unsqueeze(1).expand(s, r, t, -1), 2, cut.unsqueeze(-1).expand(-1, -1, -1, achieved.shape[-1]))
        goal_action = torch.gather(action.unsqueeze(1).expand(s, r, t), 2, cut)
        copies = r
        if self.negatives:
            neg = storage.get(storage.sample_index((s, r), generator))
            goal = torch.stack([goal, space.project(neg[keys.OBS]).unsqueeze(2).expand(-1, -1, t, -1)], 2)
            goal_action = torch.stack([goal_action, neg[keys.ACTION].unsqueeze(2).expand(-1, -1, t)], 2)
            copies = 2 * r

        def tile(x: torch.Tensor) -> torch.Tensor:
            # [s, t, ...] -> [s * copies, t, ...]: one copy per relabelled goal sequence.
            return x.unsqueeze(1).expand(s, copies, *x.shape[1:]).reshape(s * copies, *x.shape[1:])

        goal = goal.reshape(s * copies, t, -1)
        goal_action = goal_action.reshape(s * copies, t)
        obs, act = tile(seq[keys.OBS]), tile(action)
        reward = goal_reached(space, tile(achieved), act, goal, goal_action, scale).float()
        return TensorDict(
            {
                keys.OBS: obs,
                keys.NEXT_OBS: tile(seq[keys.NEXT_OBS]),
                keys.ACTION: act,
                keys.GOAL: goal,
                keys.GOAL_ACTION: goal_action,
                keys.REWARD: reward,
                keys.TERMINATED: tile(seq[keys.TERMINATED]),
                keys.EPISODE_END: tile(end),
            },
            batch_size=[s * copies, t],
        )
