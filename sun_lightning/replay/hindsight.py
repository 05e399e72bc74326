"""Segmented-future hindsight relabelling batches of the DQN variant (SPEC §5a).

One batch: ``num_sequences`` runs of ``length`` consecutive steps; each run is
relabelled ``relabels`` times with the segmented future strategy (all
positives) and, per relabelling, paired once with a goal drawn uniformly from
D (negatives): 16 × 16 × 4 × 2 = 2048 rows with the paper's sizes.

The 2048 rows hold only 2 × 256 distinct states and 256 + 64 distinct goals,
so the batch carries those once, as tables, and the rows carry indices into
them (keys ``STATES``, ``GOALS``, ``*_INDEX``): the network's branches then
run on the tables, not on eight copies of every state.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sun_lightning import keys
from sun_lightning.envs.reach import goal_reached
from sun_lightning.replay.relabel import segment_goal_index
from sun_lightning.replay.storage import GoalReplayStorage


class SegmentedHindsightSampler:
    """Draws relabelled learning batches from a :class:`GoalReplayStorage`.

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
    def steps_needed(self) -> int:
        """Steps per env that D must hold before the first draw: one run."""
        return self.length

    @property
    def copies(self) -> int:
        """Relabelled copies of each run (positives, then negatives)."""
        return self.relabels * (2 if self.negatives else 1)

    @property
    def rows(self) -> int:
        return self.num_sequences * self.length * self.copies

    def sample(
        self,
        storage: GoalReplayStorage,
        scale: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        count: int | None = None,
    ) -> TensorDict:
        """A relabelled batch, or ``count`` independent batches stacked ``[count]``.

        Row keys ``[N, T]`` (N = num_sequences × copies, ordered run-major, then
        relabelling, then positive/negative): ACTION, GOAL_ACTION, REWARD,
        TERMINATED, EPISODE_END, STATE_INDEX, NEXT_STATE_INDEX, GOAL_INDEX.
        Tables: STATES ``[2·S·T, obs_dim]`` (the runs' states, then their
        stored next states) and GOALS ``[S·T + S·R, goal_dim]`` (the runs'
        achieved goals, then the negatives). Indices point into their own
        batch's tables.

        Drawing several batches in one call costs about as much as one: the
        ~100 small ops of a draw are bound by dispatch, not by data.

        Args:
            storage: the replay storage.
            scale: goal standardization σ̃ for the ``"radius"`` reach rule.
            generator: random generator (defaults to torch's global one).
            count: number of batches (``None``: one, without the leading dimension).
        """
        k = 1 if count is None else count
        if k <= 0:
            raise ValueError(f"count must be positive, got {count}")
        s, t, r = self.num_sequences, self.length, self.relabels
        # The draws, in this order, are the batch's only randomness.
        seq_index = storage.sequence_index(k * s, t, generator)
        u = torch.rand((k * s * r, t), generator=generator, device=storage.device)
        neg_index = storage.sample_index((k, s, r), generator) if self.negatives else None
        out = TensorDict(
            self._tensor_batch(storage, scale, seq_index, u, neg_index, k),
            batch_size=[k],
            device=storage.device,  # lets the DataModule's transfer hook see at once that a batch is already in place
        )
        return out if count is not None else out[0]

    def _tensor_batch(
        self,
        storage: GoalReplayStorage,
        scale: torch.Tensor | None,
        seq_index: torch.Tensor,
        u: torch.Tensor,
        neg_index: torch.Tensor | None,
        k: int,
    ) -> dict[str, torch.Tensor]:
        """The batch's keys from the draws."""
        space, s, t, r, c = storage.space, self.num_sequences, self.length, self.relabels, self.copies
        seq = storage.get(seq_index)
        obs, action, end = seq[keys.OBS], seq[keys.ACTION], seq[keys.EPISODE_END]  # [k·s, t]
        achieved = space.project(obs)
        device = action.device
        step = torch.arange(s * t, device=device).view(1, s, 1, t)  # position of (run, step) in its batch's tables

        cut = segment_goal_index(end.repeat_interleave(r, 0), u).view(k, s, r, t)
        goal_index = step[..., :1] + cut  # the achieved goal of the cut step, in the goal table
        goal_action = torch.gather(action.view(k, s, 1, t).expand(k, s, r, t), 3, cut)
        goals = achieved.reshape(k, s * t, -1)
        if neg_index is not None:
            neg = storage.get(neg_index, (keys.OBS, keys.ACTION))
            neg_goal = s * t + torch.arange(s * r, device=device).view(1, s, r, 1).expand(k, s, r, t)
            goal_index = torch.stack([goal_index, neg_goal], 3)
            goal_action = torch.stack([goal_action, neg[keys.ACTION].unsqueeze(3).expand(k, s, r, t)], 3)
            goals = torch.cat([goals, space.project(neg[keys.OBS]).reshape(k, s * r, -1)], 1)
        goal_index, goal_action = goal_index.reshape(k, s * c, t), goal_action.reshape(k, s * c, t)

        def rows(x: torch.Tensor) -> torch.Tensor:
            # [k·s, t] -> [k, s · copies, t]: one row per relabelled copy of each run.
            return x.view(k, s, 1, t).expand(k, s, c, t).reshape(k, s * c, t)

        state_index = step.expand(k, s, c, t).reshape(k, s * c, t)
        out = {
            keys.STATES: torch.cat([obs.reshape(k, s * t, -1), seq[keys.NEXT_OBS].reshape(k, s * t, -1)], 1),
            keys.GOALS: goals,
            keys.STATE_INDEX: state_index,
            keys.NEXT_STATE_INDEX: state_index + s * t,
            keys.GOAL_INDEX: goal_index,
            keys.ACTION: rows(action),
            keys.GOAL_ACTION: goal_action,
            keys.TERMINATED: rows(seq[keys.TERMINATED]),
            keys.EPISODE_END: rows(end),
        }
        # The runs' achieved goals are the first s·t rows of each batch's goal table.
        out[keys.REWARD] = self._reward(storage, scale, achieved.reshape(k, s * t, -1), out, s * t).float()
        return out

    @staticmethod
    def _reward(
        storage: GoalReplayStorage, scale: torch.Tensor | None, achieved: torch.Tensor, out: dict[str, torch.Tensor], stride: int
    ) -> torch.Tensor:
        """Whether each row reaches its goal, from the ``[k, ·, G]`` tables of all k batches at once.

        Args:
            achieved: each batch's achieved goals, rows ``STATE_INDEX`` (``stride`` rows per batch).
        """
        goals, state_index, goal_index = out[keys.GOALS], out[keys.STATE_INDEX], out[keys.GOAL_INDEX]
        batch = torch.arange(goals.shape[0], device=goals.device).view(-1, 1, 1)
        # Rows of the flattened tables: each batch's indices offset to its own.
        return goal_reached(
            storage.space, achieved.flatten(0, 1), out[keys.ACTION], goals.flatten(0, 1), out[keys.GOAL_ACTION], scale,
            state_index + batch * stride, goal_index + batch * goals.shape[1],
        )
