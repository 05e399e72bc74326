"""Q's row part (fusion → maxout → head) and its branches' activations as autograd functions over C row kernels.

On CPU an update of the DQN variant (SPEC §5a: 2 048 rows, width 64, 4 maxout pieces) spent
more time in memory-bound passes over ``[rows, 4 · width]`` tensors (row gathers and their
scatter-add backward, the maxout's max and mask, LayerNorms, activations) and in the dispatch of
~100 small ops than in its matrix products. Here every such pass is one C loop over rows
(``_rows.c``, built on first use by :mod:`sun_lightning.native`) and the matrix products stay
PyTorch's: forward and backward are each a handful of calls.

The maths is exactly the :class:`~sun_lightning.networks.q_network.GoalQNetwork` PyTorch path:
branches ``f = SiLU(dropout(LN(x Wᵀ)))``; rows ``pre = pre_s[oi] + pre_g[gi] + (f_s[oi] ⊙ f_g[gi]) W_pᵀ``;
``h = max over pieces``; ``a1 = leaky(LN(h))``; ``a2 = leaky(LN(a1 W2ᵀ))``; ``out = a2 W3ᵀ + b3``
(tests compare both paths' outputs and gradients). Only the dropout masks differ: the kernels
draw their own stream. Measured gain per update (README): 1.04–1.06× at 2 torch threads (the
kernels are single-threaded, PyTorch's elementwise ops are not), 1.17–1.19× at 1 thread.
"""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from sun_lightning.native import NativeError, NativeLibrary

__all__ = ["branch_forward", "native_rows_available", "rows_forward"]

_p, _int, _i64, _u64, _f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
# Selects compile to blends only without trapping math; AVX2 where PyTorch itself uses it
# (the flags name the cached build, so machines sharing a cache never load each other's).
_FLAGS = ("-fno-trapping-math", "-fno-math-errno") + (
    ("-mavx2",) if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else ())
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_rows.c"),
    {
        "rows_gather": ([_i64, _i64, _i64, _p, _p, _i64, _i64, _p, _p, _p, _p, _p, _p], _int),
        "rows_norm_act": ([_i64, _i64, _i64, _p, _p, _f32, _f32, _p, _p, _p], None),
        "rows_norm_act_backward": ([_i64, _i64, _i64, _p, _p, _p, _p, _p, _f32, _p, _p], None),
        "rows_gather_backward": ([_i64, _i64, _i64, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p], None),
        "branch_forward": ([_i64, _i64, _p, _p, _f32, _u64, _int, _f32, _p, _p, _p], None),
        "branch_backward": ([_i64, _i64, _p, _p, _p, _p, _u64, _int, _f32, _p, _p], None),
        "branch_dropout_mask": ([_i64, _i64, _u64, _int, _f32, _p], None),
    },
    "The Q network's row-kernel library (_rows.c)",
    _FLAGS,
)
_available: bool | None = None


def native_rows_available() -> bool:
    """Whether the C row kernels can be used (built or found in the cache); warns once if not."""
    global _available
    if _available is None:
        try:
            LIBRARY.load()
            _available = True
        except NativeError as e:
            warnings.warn(f"{e}\nFalling back to the (slower) PyTorch row path of the Q network.", stacklevel=2)
            _available = False
    return _available


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _forward(f_s, f_g, pre_s, pre_g, w_p, ln1_w, w2, ln2_w, w3, b3, oi, gi, eps1, eps2, slope, pieces, save):
    lib = LIBRARY.load()
    rows = oi.numel() if oi is not None else gi.numel() if gi is not None else f_s.shape[0]
    width, pw = f_s.shape[1], pre_s.shape[1]
    pre = f_s.new_empty(rows, pw)
    prod = f_s.new_empty(rows, width)
    if lib.rows_gather(rows, width, pw, _ptr(oi), _ptr(gi), f_s.shape[0], f_g.shape[0], pre_s.data_ptr(),
                       pre_g.data_ptr(), f_s.data_ptr(), f_g.data_ptr(), pre.data_ptr(), prod.data_ptr()):
        raise IndexError(f"row index out of range: tables of {f_s.shape[0]} states and {f_g.shape[0]} goals")
    pre.addmm_(prod, w_p.t())  # GEMM accumulating into the gathered sum
    saved = {}
    act1 = f_s.new_empty(rows, width)
    if save:  # the backward finds the maxout's winning pieces again in pre
        saved = dict(pre=pre, xhat1=f_s.new_empty(rows, width), rstd1=f_s.new_empty(rows),
                     xhat2=f_s.new_empty(rows, width), rstd2=f_s.new_empty(rows))
    lib.rows_norm_act(rows, width, pieces, pre.data_ptr(), ln1_w.data_ptr(), eps1, slope, act1.data_ptr(),
                      _ptr(saved.get("xhat1")), _ptr(saved.get("rstd1")))
    z2 = torch.mm(act1, w2.t())
    act2 = torch.empty_like(z2)
    lib.rows_norm_act(rows, width, 1, z2.data_ptr(), ln2_w.data_ptr(), eps2, slope, act2.data_ptr(),
                      _ptr(saved.get("xhat2")), _ptr(saved.get("rstd2")))
    out = torch.addmm(b3, act2, w3.t())
    return out, prod, act1, act2, saved


class _Rows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, f_s, f_g, pre_s, pre_g, w_p, ln1_w, w2, ln2_w, w3, b3, oi, gi, eps1, eps2, slope, pieces):
        out, prod, act1, act2, s = _forward(f_s, f_g, pre_s, pre_g, w_p, ln1_w, w2, ln2_w, w3, b3, oi, gi,
                                            eps1, eps2, slope, pieces, save=True)
        ctx.save_for_backward(f_s, f_g, w_p, ln1_w, w2, ln2_w, w3, prod, act1, act2,
                              s["pre"], s["xhat1"], s["rstd1"], s["xhat2"], s["rstd2"])
        ctx.oi, ctx.gi, ctx.slope, ctx.pieces = oi, gi, slope, pieces
        ctx.table_rows = (pre_s.shape[0], pre_g.shape[0])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        lib = LIBRARY.load()
        f_s, f_g, w_p, ln1_w, w2, ln2_w, w3, prod, act1, act2, pre, xhat1, rstd1, xhat2, rstd2 = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        rows, width = act1.shape
        pw = w_p.shape[0]
        g_w3, g_b3, g_act2 = grad_out.t().mm(act2), grad_out.sum(0), grad_out.mm(w3)
        g_z2, g_ln2 = torch.empty_like(act2), torch.zeros_like(ln2_w)
        lib.rows_norm_act_backward(rows, width, 1, g_act2.data_ptr(), xhat2.data_ptr(), rstd2.data_ptr(), None,
                                   ln2_w.data_ptr(), ctx.slope, g_z2.data_ptr(), g_ln2.data_ptr())
        g_w2, g_act1 = g_z2.t().mm(act1), g_z2.mm(w2)
        g_pre, g_ln1 = act1.new_empty(rows, pw), torch.zeros_like(ln1_w)
        lib.rows_norm_act_backward(rows, width, ctx.pieces, g_act1.data_ptr(), xhat1.data_ptr(), rstd1.data_ptr(),
                                   pre.data_ptr(), ln1_w.data_ptr(), ctx.slope, g_pre.data_ptr(), g_ln1.data_ptr())
        g_w_p, g_prod = g_pre.t().mm(prod), g_pre.mm(w_p)
        (n_s, n_g), oi, gi = ctx.table_rows, ctx.oi, ctx.gi
        g_pre_s, g_pre_g = act1.new_zeros(n_s, pw), act1.new_zeros(n_g, pw)
        g_f_s, g_f_g = torch.zeros_like(f_s), torch.zeros_like(f_g)
        lib.rows_gather_backward(rows, width, pw, _ptr(oi), _ptr(gi), g_pre.data_ptr(), g_prod.data_ptr(),
                                 f_s.data_ptr(), f_g.data_ptr(), g_pre_s.data_ptr(), g_pre_g.data_ptr(),
                                 g_f_s.data_ptr(), g_f_g.data_ptr())
        return (g_f_s, g_f_g, g_pre_s, g_pre_g, g_w_p, g_ln1, g_w2, g_ln2, g_w3, g_b3) + (None,) * 6


def rows_forward(
    f_s: torch.Tensor,
    f_g: torch.Tensor,
    pre_s: torch.Tensor,
    pre_g: torch.Tensor,
    w_p: torch.Tensor,
    ln1: torch.nn.LayerNorm,
    w2: torch.Tensor,
    ln2: torch.nn.LayerNorm,
    w3: torch.Tensor,
    b3: torch.Tensor,
    obs_index: torch.Tensor | None,
    goal_index: torch.Tensor | None,
    slope: float,
    pieces: int,
) -> torch.Tensor:
    """Head outputs ``[rows, |A|²]`` of the rows ``(obs_index[r], goal_index[r])`` of the tables.

    Args:
        f_s, f_g: branch features of the state and goal tables ``[U, W]``.
        pre_s, pre_g: their maxout pre-activations ``[U, pieces · W]``.
        w_p: the maxout weight's block for ``f_s ⊙ f_g`` ``[pieces · W, W]``.
        ln1, ln2: the head's LayerNorms (weight, no bias); ``w2``, ``w3``, ``b3``: its linears.
        obs_index, goal_index: int64 rows into the tables; ``None`` is the identity.
        slope: LeakyReLU negative slope.
        pieces: maxout pieces.
    """
    if (obs_index is None and goal_index is None and f_s.shape[0] != f_g.shape[0]) or (
        obs_index is not None and goal_index is not None and obs_index.shape != goal_index.shape
    ):
        raise ValueError(f"rows disagree: {f_s.shape[0]} states, {f_g.shape[0]} goals")
    idx = [None if i is None else i.to(torch.int64).contiguous() for i in (obs_index, goal_index)]
    tensors = [t.contiguous() for t in (f_s, f_g, pre_s, pre_g)]
    params = (w_p, ln1.weight, w2, ln2.weight, w3, b3)
    args = (*tensors, *params, *idx, ln1.eps, ln2.eps, slope, pieces)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (*tensors, *params)):
        return _Rows.apply(*args)
    # named for the profiler: ctypes calls are no aten ops, and benchmarks attribute time by op
    with torch.no_grad(), torch.profiler.record_function("sun_lightning::rows_forward"):
        return _forward(*args, save=False)[0]


# ---- the branches: SiLU(dropout(LayerNorm(h))) -------------------------------------------------
def _branch(h, ln_w, eps, seed, threshold, keep_scale, save):
    """The branch kernel's output, and its saved ``xhat``, ``rstd`` when ``save``."""
    out = torch.empty_like(h)
    xhat, rstd = (torch.empty_like(h), h.new_empty(h.shape[0])) if save else (None, None)
    LIBRARY.load().branch_forward(h.shape[0], h.shape[1], h.data_ptr(), ln_w.data_ptr(), eps, seed, threshold,
                                  keep_scale, out.data_ptr(), _ptr(xhat), _ptr(rstd))
    return out, xhat, rstd


class _Branch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, ln_w, eps, seed, threshold, keep_scale):
        out, xhat, rstd = _branch(h, ln_w, eps, seed, threshold, keep_scale, save=True)
        ctx.save_for_backward(xhat, rstd, ln_w)
        ctx.dropout = (seed, threshold, keep_scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        xhat, rstd, ln_w = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_h, grad_w = torch.empty_like(xhat), torch.zeros_like(ln_w)
        LIBRARY.load().branch_backward(xhat.shape[0], xhat.shape[1], grad_out.data_ptr(), xhat.data_ptr(),
                                       rstd.data_ptr(), ln_w.data_ptr(), *ctx.dropout, grad_h.data_ptr(),
                                       grad_w.data_ptr())
        return grad_h, grad_w, None, None, None, None


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
    with torch.no_grad(), torch.profiler.record_function("sun_lightning::branch_forward"):
        return _branch(*args, save=False)[0]
