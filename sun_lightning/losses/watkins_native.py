"""The Watkins Q(λ) targets of :meth:`DQNSVF.td_targets <sun_lightning.agents.dqn.DQNSVF.td_targets>` as one C
pass (``_watkins.c``, built by :mod:`sun_lightning.native`) on CPU.

The tensor functions of :mod:`~sun_lightning.losses.td_lambda` are the reference (tests compare
both) and run wherever this does not: GPU tensors, ``float64``, or no C compiler. On CPU they
cost ~100 small ops per update (the bootstrap, the relaxed greedy test, T fused multiply-adds
of the recurrence), dispatch-bound at 2 048 rows.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from sun_lightning.native import NativeLibrary

__all__ = ["applies", "q_rows", "watkins_targets"]

_p, _i64, _f32, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_watkins.c"),
    {
        "watkins_targets": ([_i64, _i64, _i64, _i64, _p, _p, _p, _p, _p, _p, _f32, _f32, _f32, _f32, _p, _p], _int),
        "watkins_rows": ([_i64, _i64, _p, _p, _p, _p, _p, _i64, _p], _i64),
    },
    "The Watkins Q(lambda) target kernel (_watkins.c)",
)


def applies(q: torch.Tensor) -> bool:
    """Whether the kernel serves values ``q``: float32 on CPU, and the library builds (warns once if not)."""
    return (q.device.type == "cpu" and q.dtype == torch.float32
            and LIBRARY.available("Falling back to the tensor functions of losses/td_lambda.py."))


def q_rows(
    state_index: torch.Tensor,
    next_state_index: torch.Tensor,
    goal_index: torch.Tensor,
    goal_action: torch.Tensor,
    episode_end: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """State, goal and goal-action rows ``[R]`` at which the targets need Q (the layout of :func:`watkins_targets`).

    Args:
        state_index, next_state_index, goal_index, goal_action, episode_end: the batch's ``[N, T]`` entries.
    """
    n, t = state_index.shape
    out = torch.empty(3, 2 * n * t, dtype=torch.int64)
    flat = [x.to(torch.int64).contiguous() for x in (state_index, next_state_index, goal_index, goal_action)]
    end = episode_end.to(torch.bool).contiguous()
    rows = LIBRARY.load().watkins_rows(n, t, *(x.data_ptr() for x in flat), end.data_ptr(), 2 * n * t, out.data_ptr())
    state_rows, goal_rows, goal_action_rows = out[:, :rows]
    return state_rows, goal_rows, goal_action_rows


@torch.no_grad()
def watkins_targets(
    q_online: torch.Tensor,
    q_target: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    lam: float,
    bootstrap_clip: float | None,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TD(λ) targets ``[N, T]`` and trace continuations (bool ``[N, T]``) of ``N`` sequences of ``T`` steps.

    Args:
        q_online, q_target: ``[R, A]`` values at each row's goal action; rows as in
            ``DQNSVF.td_targets``: the ``N·T`` steps, then one row per extra step (episode end or
            last step) in flat order, holding that step's next state.
        action, reward, terminated, episode_end: the batch's ``[N, T]`` entries.
        gamma, lam: discount and trace factor; bootstrap_clip: upper clip of the bootstrap (None: none);
        tol: the relaxed greediness tolerance (1 − γ in SPEC §5a).
    """
    n, t = action.shape
    rows, num_actions = q_online.shape
    if q_target.shape != q_online.shape:
        raise ValueError(f"online values {tuple(q_online.shape)} and target values {tuple(q_target.shape)} differ")
    target = torch.empty(n, t, dtype=torch.float32)
    cont = torch.empty(n, t, dtype=torch.bool)
    q_online, q_target = q_online.contiguous(), q_target.contiguous()
    action = action.to(torch.int64).contiguous()
    reward = reward.to(torch.float32).contiguous()
    terminated, episode_end = terminated.to(torch.bool).contiguous(), episode_end.to(torch.bool).contiguous()
    clip = float("inf") if bootstrap_clip is None else bootstrap_clip
    status = LIBRARY.load().watkins_targets(
        n, t, num_actions, rows, q_online.data_ptr(), q_target.data_ptr(), action.data_ptr(), reward.data_ptr(),
        terminated.data_ptr(), episode_end.data_ptr(), gamma, lam, clip, tol, target.data_ptr(), cont.data_ptr())
    if status == -2:
        raise IndexError(f"an action is outside [0, {num_actions})")
    if status:
        raise ValueError(f"{rows} value rows for {n}×{t} steps: need one more row per episode end or last step")
    return target, cont
