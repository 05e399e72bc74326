"""Target networks: a Polyak (or hard) update that a learner calls after its optimizer steps.

SPEC §5a moves the DQN target by τ = 0.001 every update and §5b TD3's critic
target by 0.005 every second update: one :class:`TargetUpdate` per network (τ = 1
is a hard copy). TD3's bootstrap actor follows the online actor step by step
instead (:class:`FollowStep`), as the code the paper ran has it.
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


class FollowStep:
    """The bootstrap actor of DISCOVER's TD3 code (SPEC §5b): around each optimizer step of the online
    network, ``target ← (1 − τ)·online_before + τ·online_after``.

    LeanderDiazBone/discover (commit 52c14285…), ``src/baselines/td3/td3_train.py`` line 650, in
    ``do_policy_update``: ``new_target_policy_params = soft_update(training_state.policy_params, policy_params,
    tau)`` with ``soft_update(x, y, τ) = (1 − τ)·x + τ·y`` and ``tau`` = 0.005 (``utils.py``'s ``--tau``), the
    critic target's rate. The target is thus the online actor as of the previous actor step, moved τ
    towards the current one; it never lags further. The TD targets and the selections read it (line 715,
    ``compute_value_function``). The paper's "actor Polyak 5e-7" is that code's ``tau_policy`` (line 651),
    which moves only a slow copy read for evaluation under ``--eval_target_policy`` (line 1285), set by none
    of its presets; it has no counterpart here.

    Call :meth:`before` right before the optimizer step and :meth:`after` right after it; neither reads
    a host value (capturable).

    Args:
        online: the trained network.
        target: its follower (same parameter shapes, in the same order).
        tau: how far past the pre-step weights the follower moves towards the post-step ones, in (0, 1].
    """

    def __init__(self, online: nn.Module, target: nn.Module, tau: float) -> None:
        # the same checks and parameter lists as a Polyak update applied every step
        polyak = TargetUpdate(online, target, tau)
        self.sources, self.targets, self.tau = polyak.sources, polyak.targets, polyak.tau

    @torch.no_grad()
    def before(self) -> None:
        """Copy the online weights as they are before the step."""
        torch._foreach_copy_(self.targets, self.sources)

    @torch.no_grad()
    def after(self) -> None:
        """Move τ of the way to the online weights after the step."""
        torch._foreach_lerp_(self.targets, self.sources, self.tau)
