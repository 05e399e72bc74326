"""The Q network after its encoders as one autograd node over C kernels (CPU, float32).

On CPU an update of the DQN variant (SPEC §5a: 2 048 rows, width 64, 4 maxout pieces) spent
more time in memory-bound passes over ``[rows, 4 · width]`` tensors (row gathers and their
scatter-add backward, the maxout's max and mask, LayerNorms, activations) and in the dispatch of
~100 small ops and their autograd nodes than in its matrix products. Here every such pass is one
C loop over rows (``_rows.c``, built on first use by :mod:`sun_lightning.native`, run on torch's
OpenMP threads), the matrix products stay PyTorch's, and the whole network (branches, tables,
rows, the goal action's columns) is one autograd node whose backward is written out by hand:
forward and backward are each ~15 calls.

The maths is exactly the :class:`~sun_lightning.networks.q_network.GoalQNetwork` PyTorch path:
branches ``f = SiLU(dropout(LN(x Wᵀ)))``; rows ``pre = pre_s[oi] + pre_g[gi] + (f_s[oi] ⊙ f_g[gi]) W_pᵀ``;
``h = max over pieces``; ``a1 = leaky(LN(h))``; ``a2 = leaky(LN(a1 W2ᵀ))``; ``out = a2 W3ᵀ + b3``
(tests compare both paths' outputs and gradients). Only the dropout masks differ: the kernels
draw their own stream. Measured per update with the C TD(λ) targets (README): 1.35× the PyTorch
path at 2 torch threads, 1.20× at 1 thread.
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from sun_lightning.native import NativeLibrary

__all__ = ["QConfig", "QParams", "branch_forward", "native_rows_available", "q_forward"]

_p, _int, _i64, _u64, _f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
# Selects compile to blends only without trapping math; AVX2 where PyTorch itself uses it
# (the flags name the cached build, so machines sharing a cache never load each other's).
_FLAGS = ("-fno-trapping-math", "-fno-math-errno") + (
    ("-mavx2",) if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else ())
# Threads only where they are PyTorch's own: a process holds one libgomp (soname libgomp.so.1, which
# torch has loaded), so the kernels' loops run on torch's OpenMP threads. A second OpenMP runtime
# would spin against torch's on the same cores (a pthread version measured slower for that reason).
_OPENMP = (("-fopenmp",) if sys.platform.startswith("linux")
           and "parallel backend: OpenMP" in torch.__config__.parallel_info() else ())
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_rows.c"),
    {
        "rows_product": ([_i64, _i64, _p, _p, _i64, _i64, _p, _p, _p], _int),
        "rows_norm_act": ([_i64, _i64, _i64, _p, _p, _p, _p, _int, _p, _p, _f32, _f32, _p, _p, _p], None),
        "rows_norm_act_backward": ([_i64, _i64, _i64, _p, _p, _p, _p, _p, _f32, _p, _p], _int),
        "rows_gather_backward": ([_i64, _i64, _i64, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p], None),
        "branch_forward": ([_i64, _i64, _p, _p, _f32, _u64, _int, _f32, _p, _p, _p], None),
        "branch_backward": ([_i64, _i64, _p, _p, _p, _p, _u64, _int, _f32, _p, _p], _int),
        "branch_dropout_mask": ([_i64, _i64, _u64, _int, _f32, _p], None),
    },
    "The Q network's row-kernel library (_rows.c)",
    _FLAGS,
    _OPENMP,
)


def native_rows_available() -> bool:
    """Whether the C row kernels can be used (built or found in the cache); warns once if not."""
    return LIBRARY.available("Falling back to the (slower) PyTorch row path of the Q network.")


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _checked(status: int) -> None:
    """Raise for a backward kernel's non-zero status (its partial sums could not be allocated)."""
    if status:
        raise MemoryError("the Q network's row kernels could not allocate their partial sums")


def _forward(f_s, f_g, pre_s, pre_g, w_p, ln1_w, w2, ln2_w, w3, b3, oi, gi, eps1, eps2, slope, pieces, save):
    lib = LIBRARY.load()
    rows = oi.numel() if oi is not None else gi.numel() if gi is not None else f_s.shape[0]
    width = f_s.shape[1]
    prod = f_s.new_empty(rows, width)
    if lib.rows_product(rows, width, _ptr(oi), _ptr(gi), f_s.shape[0], f_g.shape[0], f_s.data_ptr(),
                        f_g.data_ptr(), prod.data_ptr()):
        raise IndexError(f"row index out of range: tables of {f_s.shape[0]} states and {f_g.shape[0]} goals")
    # the product's share of the maxout pre-activations; the kernel adds the tables' rows to it
    pre = torch.mm(prod, w_p.t())
    saved = {}
    act1 = f_s.new_empty(rows, width)
    if save:  # the backward finds the maxout's winning pieces again in pre
        saved = dict(pre=pre, xhat1=f_s.new_empty(rows, width), rstd1=f_s.new_empty(rows),
                     xhat2=f_s.new_empty(rows, width), rstd2=f_s.new_empty(rows))
    lib.rows_norm_act(rows, width, pieces, _ptr(oi), _ptr(gi), pre_s.data_ptr(), pre_g.data_ptr(), int(save),
                      pre.data_ptr(), ln1_w.data_ptr(), eps1, slope, act1.data_ptr(), _ptr(saved.get("xhat1")),
                      _ptr(saved.get("rstd1")))
    z2 = torch.mm(act1, w2.t())
    act2 = torch.empty_like(z2)
    lib.rows_norm_act(rows, width, 1, None, None, None, None, 0, z2.data_ptr(), ln2_w.data_ptr(), eps2, slope,
                      act2.data_ptr(), _ptr(saved.get("xhat2")), _ptr(saved.get("rstd2")))
    out = torch.addmm(b3, act2, w3.t())
    return out, prod, act1, act2, saved


def _rows_backward(saved, w_p, ln1_w, w2, ln2_w, w3, oi, gi, slope, pieces, grad_out):
    """Gradients of :func:`_forward`'s output ``grad_out [R, |A|²]``: tables ``g_f_s, g_f_g, g_pre_s, g_pre_g``
    and weights ``g_w_p, g_ln1, g_w2, g_ln2, g_w3, g_b3``."""
    lib = LIBRARY.load()
    f_s, f_g, prod, act1, act2, pre = (saved[k] for k in ("f_s", "f_g", "prod", "act1", "act2", "pre"))
    rows, width = act1.shape
    pw = w_p.shape[0]
    g_w3, g_b3, g_act2 = grad_out.t().mm(act2), grad_out.sum(0), grad_out.mm(w3)
    g_z2, g_ln2 = torch.empty_like(act2), torch.zeros_like(ln2_w)
    _checked(lib.rows_norm_act_backward(rows, width, 1, g_act2.data_ptr(), saved["xhat2"].data_ptr(),
                                        saved["rstd2"].data_ptr(), None, ln2_w.data_ptr(), slope, g_z2.data_ptr(),
                                        g_ln2.data_ptr()))
    g_w2, g_act1 = g_z2.t().mm(act1), g_z2.mm(w2)
    g_pre, g_ln1 = act1.new_empty(rows, pw), torch.zeros_like(ln1_w)
    _checked(lib.rows_norm_act_backward(rows, width, pieces, g_act1.data_ptr(), saved["xhat1"].data_ptr(),
                                        saved["rstd1"].data_ptr(), pre.data_ptr(), ln1_w.data_ptr(), slope,
                                        g_pre.data_ptr(), g_ln1.data_ptr()))
    g_w_p, g_prod = g_pre.t().mm(prod), g_pre.mm(w_p)
    g_pre_s, g_pre_g = act1.new_zeros(f_s.shape[0], pw), act1.new_zeros(f_g.shape[0], pw)
    g_f_s, g_f_g = torch.zeros_like(f_s), torch.zeros_like(f_g)
    lib.rows_gather_backward(rows, width, pw, _ptr(oi), _ptr(gi), g_pre.data_ptr(), g_prod.data_ptr(),
                             f_s.data_ptr(), f_g.data_ptr(), g_pre_s.data_ptr(), g_pre_g.data_ptr(),
                             g_f_s.data_ptr(), g_f_g.data_ptr())
    return g_f_s, g_f_g, g_pre_s, g_pre_g, g_w_p, g_ln1, g_w2, g_ln2, g_w3, g_b3


class QParams(NamedTuple):
    """The weights of :class:`~sun_lightning.networks.q_network.GoalQNetwork` in the kernels' order."""

    w_s: torch.Tensor  # state branch linear [W, obs_dim]
    ln_s: torch.Tensor  # its LayerNorm weight [W]
    w_g: torch.Tensor  # goal branch linear [W, goal_dim]
    ln_g: torch.Tensor
    w_m: torch.Tensor  # maxout linear [pieces · W, 3 W] on concat(f_s, f_g, f_s ⊙ f_g)
    ln1: torch.Tensor  # head: LayerNorm, linear w2, LayerNorm, linear w3 + b3
    w2: torch.Tensor
    ln2: torch.Tensor
    w3: torch.Tensor
    b3: torch.Tensor


@dataclass(frozen=True)
class QConfig:
    """The non-tensor settings of one evaluation of Q.

    Attributes:
        eps: LayerNorm eps of the state branch, goal branch and the head's two LayerNorms.
        slope: LeakyReLU negative slope.
        pieces: maxout pieces.
        threshold, keep_scale: the branches' dropout (:func:`dropout_threshold`, 1 / (1 − p)); 0 and 1: none.
        seeds: the state and goal branches' dropout seeds.
    """

    eps: tuple[float, float, float, float]
    slope: float
    pieces: int
    threshold: int = 0
    keep_scale: float = 1.0
    seeds: tuple[int, int] = (0, 0)


def _q_forward(x_s, x_g, p: QParams, oi, gi, column, cfg: QConfig, save: bool):
    """Q of the rows ``(oi[r], gi[r])`` from encoded tables: ``[R, |A|²]``, or ``[R, |A|]`` at ``column``
    (each row's goal action, expanded ``[R, |A|, 1]``: its column of the row's ``|A| × |A|`` block);
    and the intermediate results the backward needs when ``save``."""
    f_s, branch_s = _branch(torch.mm(x_s, p.w_s.t()), p.ln_s, cfg.eps[0], cfg.seeds[0], cfg.threshold,
                            cfg.keep_scale, save)
    f_g, branch_g = _branch(torch.mm(x_g, p.w_g.t()), p.ln_g, cfg.eps[1], cfg.seeds[1], cfg.threshold,
                            cfg.keep_scale, save)
    # The maxout's linear map of concat(f_s, f_g, f_s ⊙ f_g) is the sum of three maps: the first two
    # run once per table row, only the product's per row.
    w_ms, w_mg, w_mp = p.w_m.split(f_s.shape[1], dim=1)
    pre_s, pre_g = torch.mm(f_s, w_ms.t()), torch.mm(f_g, w_mg.t())
    out, prod, act1, act2, saved = _forward(f_s, f_g, pre_s, pre_g, w_mp, p.ln1, p.w2, p.ln2, p.w3, p.b3, oi, gi,
                                            cfg.eps[2], cfg.eps[3], cfg.slope, cfg.pieces, save)
    if column is not None:
        out = out.view(column.shape[0], column.shape[1], -1).gather(2, column).view(column.shape[:2])
    if save:
        saved.update(f_s=f_s, f_g=f_g, prod=prod, act1=act1, act2=act2, branch_s=branch_s, branch_g=branch_g)
    return out, saved


def _q_backward(x_s, x_g, p: QParams, saved, oi, gi, column, cfg: QConfig, grad, need_inputs):
    """Gradients of :func:`_q_forward`'s output: the encoded tables' (where ``need_inputs``) and ``QParams``'."""
    if column is not None:  # only the goal action's column of each row has a gradient
        g_out = grad.new_zeros(column.shape[0], column.shape[1], p.w3.shape[0] // column.shape[1])
        g_out = g_out.scatter_(2, column, grad.unsqueeze(2)).view(column.shape[0], -1)
    else:
        g_out = grad.contiguous()
    f_s, f_g = saved["f_s"], saved["f_g"]
    w_ms, w_mg, w_mp = p.w_m.split(f_s.shape[1], dim=1)
    g_f_s, g_f_g, g_pre_s, g_pre_g, g_w_p, g_ln1, g_w2, g_ln2, g_w3, g_b3 = _rows_backward(
        saved, w_mp, p.ln1, p.w2, p.ln2, p.w3, oi, gi, cfg.slope, cfg.pieces, g_out)
    g_w_m = torch.cat([g_pre_s.t().mm(f_s), g_pre_g.t().mm(f_g), g_w_p], dim=1)
    g_f_s.addmm_(g_pre_s, w_ms)
    g_f_g.addmm_(g_pre_g, w_mg)
    g_h_s, g_ln_s = _branch_backward(g_f_s, *saved["branch_s"], p.ln_s, cfg.seeds[0], cfg.threshold, cfg.keep_scale)
    g_h_g, g_ln_g = _branch_backward(g_f_g, *saved["branch_g"], p.ln_g, cfg.seeds[1], cfg.threshold, cfg.keep_scale)
    g_x_s = g_h_s.mm(p.w_s) if need_inputs[0] else None
    g_x_g = g_h_g.mm(p.w_g) if need_inputs[1] else None
    weights = QParams(g_h_s.t().mm(x_s), g_ln_s, g_h_g.t().mm(x_g), g_ln_g, g_w_m, g_ln1, g_w2, g_ln2, g_w3, g_b3)
    return g_x_s, g_x_g, weights


class _Q(torch.autograd.Function):
    """The whole of Q after its encoders as one autograd node (forward and backward by hand)."""

    @staticmethod
    def forward(ctx, x_s, x_g, oi, gi, column, cfg, *params):
        out, saved = _q_forward(x_s, x_g, QParams(*params), oi, gi, column, cfg, save=True)
        ctx.save_for_backward(x_s, x_g, *params)
        ctx.saved, ctx.index, ctx.cfg = saved, (oi, gi, column), cfg
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x_s, x_g, *params = ctx.saved_tensors
        g_x_s, g_x_g, g_params = _q_backward(x_s, x_g, QParams(*params), ctx.saved, *ctx.index, ctx.cfg, grad,
                                             ctx.needs_input_grad[:2])
        return (g_x_s, g_x_g, None, None, None, None, *g_params)


def q_forward(
    x_s: torch.Tensor,
    x_g: torch.Tensor,
    params: QParams,
    cfg: QConfig,
    obs_index: torch.Tensor | None = None,
    goal_index: torch.Tensor | None = None,
    goal_action: torch.Tensor | None = None,
) -> torch.Tensor:
    """Q values of rows ``(obs_index[r], goal_index[r])`` of encoded state and goal tables.

    Args:
        x_s, x_g: encoded state and goal tables ``[U_s, obs_dim]``, ``[U_g, goal_dim]``.
        params: the network's weights; cfg: its settings and this call's dropout.
        obs_index, goal_index: int rows ``[R]`` into the tables; ``None`` is the identity.
        goal_action: ``[R]`` goal action of each row: returns Q(s, ·, g_s, g_a) ``[R, |A|]``;
            else all ``[R, |A|, |A|]``.
    """
    if (obs_index is None and goal_index is None and x_s.shape[0] != x_g.shape[0]) or (
        obs_index is not None and goal_index is not None and obs_index.shape != goal_index.shape
    ):
        raise ValueError(f"rows disagree: {x_s.shape[0]} states, {x_g.shape[0]} goals")
    oi, gi = (None if i is None else i.to(torch.int64).contiguous() for i in (obs_index, goal_index))
    num_actions = math.isqrt(params.w3.shape[0])
    column = None
    if goal_action is not None:  # the goal action's column of each row's |A| × |A| block
        rows = oi.numel() if oi is not None else gi.numel() if gi is not None else x_s.shape[0]
        if goal_action.numel() != rows:
            raise ValueError(f"goal_action has {goal_action.numel()} entries for {rows} rows")
        column = goal_action.to(torch.int64).view(-1, 1, 1).expand(-1, num_actions, 1)
    x_s, x_g = x_s.contiguous(), x_g.contiguous()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x_s, x_g, *params)):
        out = _Q.apply(x_s, x_g, oi, gi, column, cfg, *params)
    else:
        # named for the profiler: ctypes calls are no aten ops, and benchmarks attribute time by op
        with torch.no_grad(), torch.profiler.record_function("sun_lightning::q_forward"):
            out = _q_forward(x_s, x_g, params, oi, gi, column, cfg, save=False)[0]
    return out if column is not None else out.unflatten(-1, (num_actions, num_actions))


# ---- the branches: SiLU(dropout(LayerNorm(h))) -------------------------------------------------
def _branch(h, ln_w, eps, seed, threshold, keep_scale, save):
    """The branch kernel's output, and ``(xhat, rstd)`` for the backward when ``save``."""
    out = torch.empty_like(h)
    xhat, rstd = (torch.empty_like(h), h.new_empty(h.shape[0])) if save else (None, None)
    LIBRARY.load().branch_forward(h.shape[0], h.shape[1], h.data_ptr(), ln_w.data_ptr(), eps, seed, threshold,
                                  keep_scale, out.data_ptr(), _ptr(xhat), _ptr(rstd))
    return out, (xhat, rstd)


def _branch_backward(grad_out, xhat, rstd, ln_w, seed, threshold, keep_scale):
    """Gradients of :func:`_branch` with respect to ``h`` and ``ln_w`` (the mask is recomputed from the seed)."""
    grad_out = grad_out.contiguous()
    grad_h, grad_w = torch.empty_like(xhat), torch.zeros_like(ln_w)
    _checked(LIBRARY.load().branch_backward(xhat.shape[0], xhat.shape[1], grad_out.data_ptr(), xhat.data_ptr(),
                                            rstd.data_ptr(), ln_w.data_ptr(), seed, threshold, keep_scale,
                                            grad_h.data_ptr(), grad_w.data_ptr()))
    return grad_h, grad_w


class _Branch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, ln_w, eps, seed, threshold, keep_scale):
        out, (xhat, rstd) = _branch(h, ln_w, eps, seed, threshold, keep_scale, save=True)
        ctx.save_for_backward(xhat, rstd, ln_w)
        ctx.dropout = (seed, threshold, keep_scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        xhat, rstd, ln_w = ctx.saved_tensors
        return (*_branch_backward(grad_out, xhat, rstd, ln_w, *ctx.dropout), None, None, None, None)


def dropout_threshold(p: float) -> int:
    """16-bit threshold of the kernels' dropout: an element is dropped with probability ``threshold / 65536`` ≈ p."""
    return round(p * 65536)


def branch_dropout_mask(shape: tuple[int, int], p: float, seed: int) -> torch.Tensor:
    """The mask (0 or 1 / (1 − p)) that :func:`branch_forward` applies with ``seed``."""
    out = torch.empty(shape)
    LIBRARY.load().branch_dropout_mask(shape[0], shape[1], seed, dropout_threshold(p), 1.0 / (1.0 - p), out.data_ptr())
    return out


def branch_forward(h: torch.Tensor, ln: torch.nn.LayerNorm, p: float, seed: int | None = None) -> torch.Tensor:
    """``SiLU(dropout_p(LayerNorm(h)))`` of ``h [U, W]`` (the branches of SPEC §5a after their linear map).

    The dropout mask is a hash of (seed, element) (:func:`branch_dropout_mask`), p quantized to
    1/65536 like ``q_network.dropout_mask``; the seed is drawn from torch's generator by default,
    so ``torch.manual_seed`` fixes the masks. ``p = 0``: no dropout.
    """
    threshold = dropout_threshold(p) if p > 0 else 0
    if threshold and seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    args = (h.contiguous(), ln.weight, ln.eps, seed or 0, threshold, 1.0 / (1.0 - p) if threshold else 1.0)
    if torch.is_grad_enabled() and (h.requires_grad or ln.weight.requires_grad):
        return _Branch.apply(*args)
    with torch.no_grad():
        return _branch(*args, save=False)[0]
