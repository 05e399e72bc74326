"""The DQN variant's loss as one autograd node, computed with its gradient in one C call (CPU, float32).

:meth:`DQNSVF.loss <sun_lightning.agents.dqn.DQNSVF.loss>` is, per update (SPEC §5a): the rows at
which Q is needed, the online network with dropout and the target network without, the Watkins
TD(λ) targets, Q(s_t, a_t, g_t) and the mean Huber loss, then the backward through all of it. Each
of those pieces already runs in C (:mod:`~sun_lightning.networks.rows`,
:mod:`~sun_lightning.losses.watkins_native`), but calling them one by one from Python, with the
gathers, the Huber loss, the statistics and their autograd nodes in between, cost ~4 ms per update
on the 2-core CPU machine: as much as the network's own elementwise work and two thirds of its
matrix products. Here the whole loss is ``_q_loss.c`` (built into the row kernels' library): one
call computes the loss, its statistics and, where autograd will need it, its gradient through the
online network, while the saved activations are still in cache; the autograd node's backward only
hands that gradient over (scaled by the output's gradient). Gradients are those of the weights as
they were at the forward, as autograd's would be (which would refuse weights changed in between).

The maths is that of ``DQNSVF.td_targets`` and ``F.huber_loss``, which remain the reference (and the
path on GPU, under ``native_rows=False`` and for RBF-encoded ensembles): tests compare the two.
"""

from __future__ import annotations

import ctypes

import torch
from tensordict import TensorDict
from torch.autograd.function import once_differentiable

from sun_lightning import keys
from sun_lightning.networks.rows import (
    LIBRARY,
    QConfig,
    QParams,
    checked_weights,
    optional_ptr,
    scratch_buffer,
    split_grads,
)

__all__ = ["q_loss"]

_i64, _f32 = ctypes.c_int64, ctypes.c_float
_ERRORS = {
    -1: (IndexError, "a row index of the batch is outside the state or goal table"),
    -2: (IndexError, "a goal action is outside the action set"),
    -3: (RuntimeError, "the Q network's C path has no sgemm_"),
    -4: (IndexError, "an action is outside the action set"),
    -5: (MemoryError, "the loss kernel could not allocate its partial sums"),
    -6: (ValueError, "the C path of Q takes at most 8 maxout pieces"),
}


def _checked(status: int) -> None:
    if status:
        error, message = _ERRORS.get(status, (RuntimeError, f"the loss kernel failed ({status})"))
        raise error(message)


class _LossCall:
    """The C arguments of one loss evaluation."""

    def __init__(self, x_s, x_g, xt_s, xt_g, params: QParams, target_params: QParams, cfg: QConfig,
                 batch: TensorDict, hyper: tuple[float, float, float, float, float]) -> None:
        action = batch[keys.ACTION]
        n, t = action.shape
        dims, self.params = checked_weights(x_s, x_g, params, cfg.pieces)
        target_dims, self.target_params = checked_weights(xt_s, xt_g, target_params, cfg.pieces)
        if target_dims != dims:
            raise ValueError("the target network's tables and weights differ in shape from the online network's")
        self.shape = (_i64 * 10)(n, t, *dims)
        # The batch's columns as the C side reads them (no copies for the sampler's own dtypes).
        self.batch = [_column(batch[k], torch.int64) for k in (
            keys.STATE_INDEX, keys.NEXT_STATE_INDEX, keys.GOAL_INDEX, keys.GOAL_ACTION)]
        self.batch += [_column(action, torch.int64), _column(batch[keys.REWARD], torch.float32),
                       _column(batch[keys.TERMINATED], torch.bool), _column(batch[keys.EPISODE_END], torch.bool)]
        self.x_s, self.x_g, self.xt_s, self.xt_g = x_s, x_g, xt_s, xt_g
        self.cfg = cfg
        self.hyper = (_f32 * 5)(*hyper)

    def run(self, params: QParams | None, need_inputs: tuple[bool, bool] = (False, False)):
        """The loss and its statistics; with ``params``, also the gradients of the loss with respect to the
        encoded tables (where ``need_inputs``) and to ``params``, computed in the same C call."""
        lib, cfg = LIBRARY.load(), self.cfg
        scratch = scratch_buffer(lib.q_loss_workspace(self.shape))
        loss, stats = torch.empty((), dtype=torch.float32), torch.empty(4, dtype=torch.float32)
        flat = g_x_s = g_x_g = None
        if params is not None:
            flat = torch.empty(sum(t.numel() for t in params), dtype=torch.float32)
            g_x_s = torch.empty_like(self.x_s) if need_inputs[0] else None
            g_x_g = torch.empty_like(self.x_g) if need_inputs[1] else None
        _checked(lib.q_loss(
            self.shape, self.x_s.data_ptr(), self.x_g.data_ptr(), self.xt_s.data_ptr(), self.xt_g.data_ptr(),
            self.params, self.target_params, *[c.data_ptr() for c in self.batch], cfg.c_eps, cfg.slope, cfg.c_seeds,
            cfg.threshold, cfg.keep_scale, self.hyper, scratch.data_ptr(), loss.data_ptr(), stats.data_ptr(),
            int(flat is not None), optional_ptr(flat), optional_ptr(g_x_s), optional_ptr(g_x_g)))
        grads = None if flat is None else (flat, g_x_s, g_x_g, split_grads(flat, params))
        return loss, stats, grads


def _column(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if x.dtype is dtype and x.is_contiguous() else x.to(dtype).contiguous()


class _QLoss(torch.autograd.Function):
    """The loss of :func:`q_loss` as one autograd node: the C call that computes the loss also computes its
    gradient (at ``d output = 1``), and the backward only scales it by the output's gradient (exact for 1)."""

    @staticmethod
    def forward(ctx, call: _LossCall, x_s, x_g, *params):
        loss, stats, ctx.grads = call.run(QParams(*params), (x_s.requires_grad, x_g.requires_grad))
        ctx.mark_non_differentiable(stats)
        return loss, stats

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _grad_stats):
        (flat, g_x_s, g_x_g, grads), ctx.grads = ctx.grads, None
        if grad_loss.item() != 1.0:  # (a pass over the gradients costs more than the test)
            flat.mul_(grad_loss)  # the weights' gradients are views of flat
            g_x_s, g_x_g = (None if g is None else g.mul_(grad_loss) for g in (g_x_s, g_x_g))
        return (None, g_x_s, g_x_g, *grads)


def q_loss(
    x_s: torch.Tensor,
    x_g: torch.Tensor,
    xt_s: torch.Tensor,
    xt_g: torch.Tensor,
    params: QParams,
    target_params: QParams,
    cfg: QConfig,
    batch: TensorDict,
    gamma: float,
    lam: float,
    bootstrap_clip: float | None,
    tol: float,
    huber_delta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean Huber loss of Q(s_t, a_t, g_t) against Watkins TD(λ) targets, and its statistics (SPEC §5a).

    Args:
        x_s, x_g: the online network's encoded state and goal tables (``STATES``, ``GOALS``).
        xt_s, xt_g: the target network's (the same tensors where the encoders are the identity).
        params, target_params: the two networks' weights; cfg: the online network's settings and
            dropout (the target network runs without dropout).
        batch: a relabelled ``[N, T]`` batch (``SegmentedHindsightSampler``).
        gamma, lam, bootstrap_clip, tol: as ``DQNSVF.td_targets`` (``tol`` = 1 − γ in the paper).
        huber_delta: the Huber loss's δ.

    Returns:
        The loss (0-dim, differentiable with respect to ``x_s``, ``x_g`` and ``params``) and the
        statistics ``[4]`` (no grad): the loss, mean Q(s_t, a_t, g_t), mean target and the fraction
        of traces that continue.
    """
    clip = float("inf") if bootstrap_clip is None else bootstrap_clip
    call = _LossCall(x_s.contiguous(), x_g.contiguous(), xt_s.contiguous(), xt_g.contiguous(), params, target_params,
                     cfg, batch, (gamma, lam, clip, tol, huber_delta))
    if torch.is_grad_enabled() and (x_s.requires_grad or x_g.requires_grad or any(t.requires_grad for t in params)):
        return _QLoss.apply(call, call.x_s, call.x_g, *params)
    loss, stats, _ = call.run(None)
    return loss, stats
