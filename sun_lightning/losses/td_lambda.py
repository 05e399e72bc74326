"""TD(λ) targets with Watkins's cutting traces for the discrete (DQN) variant.

Implements the target side of SPEC §5a ("Double DQN with TD(λ) and Watkins's
cutting traces, two changes: the bootstrap max_a Q(s', a, g) is clipped to 1;
an action counts as greedy (trace not cut) if its Q is within 1 − γ of the
max") and the paper appendix "Gridworlds and Classic Control".

All functions are pure tensor functions: they take no modules, hold no state,
and are vectorised over arbitrary leading dimensions. Only the time axis of
:func:`watkins_lambda_returns` is looped over, because the λ-return is a
linear recurrence along time.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["watkins_lambda_returns", "greedy_within", "double_q_bootstrap"]


def watkins_lambda_returns(
    rewards: Tensor,
    dones: Tensor,
    bootstrap: Tensor,
    cont: Tensor,
    gamma: float,
    lam: float,
) -> Tensor:
    """Backward-view λ-returns with Watkins's cutting traces (SPEC §5a).

    For every t (processed from the last step backwards)::

        G_t = r_t + γ (1 − d_t) ((1 − λ c_t) B_t + λ c_t G_{t+1}),

    with ``c_{T-1}`` treated as 0, since there is no ``G_T`` inside the
    sequence. A cut (``c_t = 0``) turns ``G_t`` into the one-step target
    ``r_t + γ B_t``; a done (``d_t = 1``) stops bootstrapping altogether, since
    reaching the goal is terminal (paper appendix "Gridworlds and Classic
    Control": reward 1 and terminal when (s, a) matches the goal).

    Args:
        rewards: ``[..., T]`` rewards ``r_t``.
        dones: ``[..., T]`` (float or bool) ``d_t = 1`` if step t ends the
            return (goal reached or environment terminated).
        bootstrap: ``[..., T]`` bootstrap value ``B_t`` of ``s_{t+1}``, already
            clipped by the caller (see :func:`double_q_bootstrap`).
        cont: ``[..., T]`` (float or bool) ``c_t = 1`` if the trace continues
            from t into t+1: t+1 lies in the sequence, no episode boundary at
            t, and ``a_{t+1}`` is greedy (see :func:`greedy_within`). The value
            at ``T-1`` is ignored.
        gamma: Discount γ.
        lam: Trace decay λ.

    Returns:
        ``[..., T]`` tensor of λ-returns ``G_t`` with the dtype and device of
        ``rewards`` (``rewards`` is promoted to the default float dtype if it
        is not floating point).
    """
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    r = rewards.to(dtype)
    if r.shape[-1] == 0:
        return r.clone()
    not_done = 1.0 - dones.to(dtype)
    c = cont.to(dtype)
    # No G_T exists inside the window, so the last step always bootstraps from
    # B_{T-1}; zeroing c_{T-1} (out of place, the caller's tensor is untouched)
    # encodes exactly that.
    c = torch.cat([c[..., :-1], torch.zeros_like(c[..., -1:])], dim=-1)
    lam_c = lam * c
    # Rewrite the recursion as G_t = a_t + b_t * G_{t+1} so that everything
    # except the scan is computed in one vectorised pass and the time loop
    # costs a single fused multiply-add per step.
    g_nd = gamma * not_done
    a = r + g_nd * (1.0 - lam_c) * bootstrap.to(dtype)
    b = g_nd * lam_c
    T = r.shape[-1]
    # Collect the steps and stack rather than writing into a preallocated
    # tensor: in-place writes would break autograd should a caller ever
    # differentiate through the targets.
    g = a[..., T - 1]
    out = [g]
    for t in range(T - 2, -1, -1):
        g = torch.addcmul(a[..., t], b[..., t], g)
        out.append(g)
    out.reverse()
    return torch.stack(out, dim=-1)


def greedy_within(q: Tensor, actions: Tensor, tol: float) -> Tensor:
    """Relaxed greediness test for Watkins's cut (SPEC §5a).

    The paper relaxes the strict argmax used by Watkins's cutting: an action
    counts as greedy if its Q-value lies within ``1 − γ`` of the maximum
    (appendix "Gridworlds and Classic Control"), so ties and near-ties do not
    cut the trace. The caller passes ``tol = 1 − γ``.

    Args:
        q: ``[..., A]`` action values.
        actions: ``[...]`` integer action indices.
        tol: Tolerance; the action is greedy iff
            ``q[action] >= max_a q − tol``.

    Returns:
        ``[...]`` bool tensor.
    """
    q_a = q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return q_a >= q.amax(dim=-1) - tol


def double_q_bootstrap(
    q_online: Tensor, q_target: Tensor, clip: float | None = 1.0
) -> Tensor:
    """Double-DQN bootstrap value, clipped from above (SPEC §5a).

    The online network chooses the action and the target network evaluates
    it (van Hasselt et al.). Because successor values lie in [0, 1], the
    paper clips the bootstrap to 1 to curb overestimation (appendix
    "Gridworlds and Classic Control").

    Args:
        q_online: ``[..., A]`` online-network Q-values at ``s'``.
        q_target: ``[..., A]`` target-network Q-values at ``s'``.
        clip: Upper bound on the bootstrap, or ``None`` for no clipping.

    Returns:
        ``[...]`` bootstrap values ``min(q_target[argmax_a q_online], clip)``.
    """
    a_star = q_online.argmax(dim=-1, keepdim=True)
    value = q_target.gather(-1, a_star).squeeze(-1)
    if clip is not None:
        # Only an upper clamp: the SPEC clips the max to 1, not to [0, 1].
        value = value.clamp(max=clip)
    return value
