"""Target networks: a Polyak (or hard) update that a learner calls after its optimizer steps.

SPEC §5a moves the DQN target by τ = 0.001 every update; §5b moves TD3's
critic target by 0.005 and its actor target by 5e-7, every second update. One
:class:`TargetUpdate` per network covers all three (τ = 1 is a hard copy).
"""

from __future__ import annotations

import torch
from torch import nn


class TargetUpdate:
    """``target ← target + τ (online − target)`` on every ``every``-th call.

    Only parameters are averaged; buffers (e.g. running observation statistics)
    are the learner's to share.

    Args:
        online: the trained network.
        target: its target copy (same parameter shapes, in the same order).
        tau: Polyak rate in (0, 1]; 1 copies the online weights.
        every: update the target on every ``every``-th call only.
    """

    def __init__(self, online: nn.Module, target: nn.Module, tau: float, every: int = 1) -> None:
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.sources = list(online.parameters())
        self.targets = list(target.parameters())
        if len(self.sources) != len(self.targets) or any(
                s.shape != t.shape for s, t in zip(self.sources, self.targets)):
            raise ValueError("the target network's parameters must match the online network's, in order")
        self.tau, self.every = float(tau), int(every)
        self.calls = 0

    def __call__(self) -> bool:
        """Count one call; move the target if this call is due. Returns whether it moved."""
        moved = self.due
        self.advance()
        if moved:
            self.move()
        return moved

    @property
    def due(self) -> bool:
        """Whether the next call moves the target (a host-side schedule: a captured update bakes it in)."""
        return (self.calls + 1) % self.every == 0

    def advance(self) -> None:
        """Count one call without moving (the move itself ran inside a captured update)."""
        self.calls += 1

    @torch.no_grad()
    def move(self) -> None:
        """One Polyak step of every parameter, in place (no host reads: capturable)."""
        if self.tau == 1.0:
            torch._foreach_copy_(self.targets, self.sources)
        else:
            torch._foreach_lerp_(self.targets, self.sources, self.tau)

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])
