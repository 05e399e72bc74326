"""The DQN variant's loss as one autograd node whose forward and backward are one C call each (CPU, float32).

:meth:`DQNSVF.loss <sun_lightning.agents.dqn.DQNSVF.loss>` is, per update (SPEC §5a): the rows at
which Q is needed, the online network with dropout and the target network without, the Watkins
TD(λ) targets, Q(s_t, a_t, g_t) and the mean Huber loss, then the backward through all of it. Each
of those pieces already runs in C (:mod:`~sun_lightning.networks.rows`,
:mod:`~sun_lightning.losses.watkins_native`), but calling them one by one from Python, with the
gathers, the Huber loss, the statistics and their autograd nodes in between, cost ~4 ms per update
on the 2-core CPU machine: as much as the network's own elementwise work and two thirds of its
matrix products. Here the whole loss is ``_q_loss.c`` (built into the row kernels' library): one
call computes the loss, its statistics and the loss's gradient with respect to the online values;
the backward is one more call through the network.

The maths is that of ``DQNSVF.td_targets`` and ``F.huber_loss``, which remain the reference (and the
path on GPU, under ``native_rows=False`` and for the ensembles): tests compare the two.
"""

from __future__ import annotations

import ctypes

import torch
from tensordict import TensorDict
from torch.autograd.function import once_differentiable

from sun_lightning import keys
from sun_lightning.networks.rows import (LIBRARY, QConfig, QParams, give_buffer, network_dims, param_pointers,
                                         scratch_buffer, split_grads, take_buffer)

__all__ = ["q_loss"]

_p, _i64, _u64, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
_ERRORS = {
    -1: (IndexError, "a row index of the batch is outside the state or goal table"),
    -2: (IndexError, "a goal action is outside the action set"),
    -3: (RuntimeError, "the Q network's C path has no sgemm_"),
    -4: (IndexError, "an action is outside the action set"),
}

def _checked(status: int) -> None:
    if status:
        error, message = _ERRORS.get(status, (RuntimeError, f"the loss kernel failed ({status})"))
        raise error(message)


class _LossCall:
    """The C arguments of one loss evaluation, kept by the autograd node for its backward."""

    def __init__(self, x_s, x_g, xt_s, xt_g, params: QParams, target_params: QParams, cfg: QConfig,
                 batch: TensorDict, hyper: tuple[float, float, float, float, float]) -> None:
        action = batch[keys.ACTION]
        n, t = action.shape
        dims = network_dims(x_s, x_g, params, cfg.pieces)
        if network_dims(xt_s, xt_g, target_params, cfg.pieces) != dims:
            raise ValueError("the target network's tables and weights differ in shape from the online network's")
        self.shape = (_i64 * 10)(n, t, *dims)
        self.num_actions = dims[-1]
        self.params, self.target_params = param_pointers(params), param_pointers(target_params)
        # The batch's columns as the C side reads them (no copies for the sampler's own dtypes).
        self.batch = [batch[k].to(torch.int64).contiguous() for k in (
            keys.STATE_INDEX, keys.NEXT_STATE_INDEX, keys.GOAL_INDEX, keys.GOAL_ACTION)]
        self.batch += [action.to(torch.int64).contiguous(), batch[keys.REWARD].to(torch.float32).contiguous(),
                       batch[keys.TERMINATED].to(torch.bool).contiguous(), batch[keys.EPISODE_END].to(torch.bool).contiguous()]
        self.x_s, self.x_g, self.xt_s, self.xt_g = x_s, x_g, xt_s, xt_g
        self.cfg = cfg
        self.eps, self.seeds = cfg.c_eps, cfg.c_seeds
        self.hyper = (_f32 * 5)(*hyper)
        self.rows = None
        self.saved = self.row_index = self.grad_q = None

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        lib, cfg, nt = LIBRARY.load(), self.cfg, self.shape[0] * self.shape[1]
        self.saved = take_buffer(lib.q_loss_workspace(self.shape, 0))
        self.row_index = torch.empty(6 * nt, dtype=torch.int64)
        self.grad_q = torch.empty(2 * nt * self.num_actions, dtype=torch.float32)
        scratch = scratch_buffer(lib.q_loss_workspace(self.shape, 1))
        loss, stats = torch.empty((), dtype=torch.float32), torch.empty(4, dtype=torch.float32)
        rows = _i64()
        _checked(lib.q_loss_forward(
            self.shape, self.x_s.data_ptr(), self.x_g.data_ptr(), self.xt_s.data_ptr(), self.xt_g.data_ptr(),
            self.params, self.target_params, *(c.data_ptr() for c in self.batch), self.eps, cfg.slope, self.seeds,
            cfg.threshold, cfg.keep_scale, self.hyper, self.saved.data_ptr(), self.row_index.data_ptr(),
            self.grad_q.data_ptr(), scratch.data_ptr(), loss.data_ptr(), stats.data_ptr(), ctypes.byref(rows)))
        self.rows = rows.value
        return loss, stats

    def backward(self, grad: float, params: QParams, need_inputs) -> tuple:
        lib, cfg = LIBRARY.load(), self.cfg
        flat = torch.empty(sum(t.numel() for t in params), dtype=torch.float32)
        g_x_s = torch.empty_like(self.x_s) if need_inputs[0] else None
        g_x_g = torch.empty_like(self.x_g) if need_inputs[1] else None
        scratch = scratch_buffer(lib.q_loss_workspace(self.shape, 1))
        _checked(lib.q_loss_backward(
            self.shape, self.rows, self.x_s.data_ptr(), self.x_g.data_ptr(), self.params, self.row_index.data_ptr(),
            cfg.slope, self.seeds, cfg.threshold, cfg.keep_scale, self.saved.data_ptr(), self.grad_q.data_ptr(),
            grad, scratch.data_ptr(), flat.data_ptr(), None if g_x_s is None else g_x_s.data_ptr(),
            None if g_x_g is None else g_x_g.data_ptr()))
        self.release()
        return g_x_s, g_x_g, split_grads(flat, params)

    def release(self) -> None:
        """Hand the saved workspace back for reuse (after the backward, or when there is none)."""
        give_buffer(self.saved)
        self.saved = None


class _QLoss(torch.autograd.Function):
    """The loss of :func:`q_loss` as one autograd node (forward and backward by hand, one C call each)."""

    @staticmethod
    def forward(ctx, call: _LossCall, x_s, x_g, *params):
        loss, stats = call.forward()
        ctx.save_for_backward(x_s, x_g, *params)  # version checks: in-place changes before the backward raise
        ctx.call = call
        ctx.mark_non_differentiable(stats)
        return loss, stats

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _grad_stats):
        x_s, x_g, *params = ctx.saved_tensors
        g_x_s, g_x_g, grads = ctx.call.backward(float(grad_loss), QParams(*params), ctx.needs_input_grad[1:3])
        ctx.call = None  # frees the saved workspace
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
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x_s, x_g, *params)):
        return _QLoss.apply(call, call.x_s, call.x_g, *params)
    loss, stats = call.forward()
    call.release()
    return loss, stats
