"""Segmented-future hindsight relabelling for the discrete (DQN) variant.

Implements the "segmented future" HER of SPEC §5a (paper appendix
"Gridworlds and Classic Control", figure "HER segmented"): each sampled
sequence of T transitions is split into contiguous segments; for a segment
starting at s a future cut k in [s, e] is drawn (e = the end of the episode
containing s, or the end of the window), (s_k, a_k) becomes the goal of every
step s..k, and the next segment starts at k+1. Unlike per-step "future" HER,
every row of the window is used exactly once, so batches keep a fixed shape.

Both functions return goal *indices* into the time axis; gathering the goal
(s_k, a_k) and building rewards/dones is the caller's job.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["segment_goal_index", "sample_segment_goal_index"]


def segment_goal_index(episode_end: Tensor, u: Tensor) -> Tensor:
    """Deterministic segmented-future goal indices (SPEC §5a).

    Walking each row left to right, a segment starts at s (s = 0 first); let
    e be the first index >= s with ``episode_end[e]`` True, or T-1 if none;
    the cut is ``k = s + floor(u[n, s] * (e - s + 1))`` (uniform over [s, e],
    clamped to e so that u → 1 cannot overshoot); steps s..k all get goal
    index k and the next segment starts at k+1. Segments therefore never
    cross an episode boundary.

    Vectorised over N with no loop over T either: the segment starts are the
    orbit of 0 under ``f(t) = cut(t) + 1`` (the start that follows a segment
    beginning at t), and the orbit is enumerated by pointer doubling in
    ``ceil(log2 T)`` rounds. That keeps the call to ~30 small tensor ops
    (about 4 rounds for T = 16) instead of several ops per time step, which
    matters because this runs every update and small-tensor dispatch
    overhead, not arithmetic, dominates its cost (on a GPU, kernel launches).

    Args:
        episode_end: ``[N, T]`` bool, True where step t is the last step of
            its episode inside the window (terminated or truncated).
        u: ``[N, T]`` uniforms in [0, 1) supplied by the caller; only
            ``u[n, s]`` at segment starts s are read.

    Returns:
        ``[N, T]`` long tensor of goal indices; ``goal[n, t] >= t`` and
        ``goal[n, goal[n, t]] == goal[n, t]``.
    """
    N, T = episode_end.shape
    device = episode_end.device
    if T == 0:
        return torch.empty((N, 0), dtype=torch.long, device=device)
    idx = torch.arange(T, device=device)
    # e(t) = first episode end at or after t: a reverse running minimum over
    # the end positions, with T-1 standing in for "no end in the window".
    end_pos = torch.where(episode_end.bool(), idx, T - 1)
    next_end = end_pos.flip(-1).cummin(-1).values.flip(-1)
    # Cut for a segment that would start at t, for every t at once; only the
    # entries at actual segment starts end up being used. Truncation equals
    # floor here (non-negative), and the clamp guards u * len rounding up to
    # len in low precision.
    off = (u * (next_end - (idx - 1))).long()
    cut = torch.minimum(idx + off, next_end)
    # Successor map f(t) = cut(t) + 1 on nodes 0..T, with T an absorbing sink
    # meaning "past the window".
    succ = torch.cat([cut + 1, cut.new_full((N, 1), T)], dim=1)
    # Pointer doubling: after round j, `orbit` holds f^m(0) for m < 2^(j+1)
    # and `jump` is f^(2^(j+1)). f strictly increases until the sink, so at
    # most T starts exist and 2^rounds >= T covers them all.
    rounds = (T - 1).bit_length()
    orbit = cut.new_zeros((N, 1))
    jump = succ
    for j in range(rounds):
        orbit = torch.cat([orbit, jump.gather(1, orbit)], dim=1)
        if j + 1 < rounds:
            jump = jump.gather(1, jump)
    # Mark the starts (scatter of a constant, so duplicate sink hits are
    # harmless), then map every t to the latest start <= t; 0 is always a
    # start, so the running max is well defined.
    is_start = torch.zeros((N, T + 1), dtype=torch.bool, device=device)
    is_start.scatter_(1, orbit, True)
    start_of = (idx * is_start[:, :T]).cummax(dim=1).values
    return cut.gather(1, start_of)


def sample_segment_goal_index(
    episode_end: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """Draw uniforms and compute segmented-future goal indices (SPEC §5a).

    Args:
        episode_end: ``[N, T]`` bool episode-end flags (see
            :func:`segment_goal_index`).
        generator: Optional ``torch.Generator`` for reproducible draws; it
            must live on ``episode_end``'s device.

    Returns:
        ``[N, T]`` long tensor of goal indices.
    """
    u = torch.rand(
        episode_end.shape, generator=generator, device=episode_end.device
    )
    return segment_goal_index(episode_end, u)
