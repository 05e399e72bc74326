"""A period in env frames, the unit every callback of a run counts in (checkpoints, evaluation, logging)."""

from __future__ import annotations


class EveryFrames:
    """Due once each time the frame count reaches the next multiple of ``period``; a count that jumps past
    several multiples is due once, and the next one is the multiple after it.

    Attributes:
        period: the period in env frames (> 0).
        next: the frame count at which it is next due (checkpointed by its owner).
    """

    def __init__(self, period: int) -> None:
        self.period, self.next = period, period

    def due(self, frames: int) -> bool:
        return frames >= self.next

    def advance(self, frames: int) -> None:
        """The next multiple of the period after ``frames``."""
        self.next = (frames // self.period + 1) * self.period

    def tick(self, frames: int) -> bool:
        """Whether it is due at ``frames``, moving on to the next multiple if so."""
        if not self.due(frames):
            return False
        self.advance(frames)
        return True
