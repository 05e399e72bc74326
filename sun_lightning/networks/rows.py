"""The Q network after its encoders as one autograd node whose forward and backward are each one C call (CPU, float32).

On CPU an update of the DQN variant (SPEC §5a: 2 048 rows, width 64, 4 maxout pieces) spent
more time in memory-bound passes over ``[rows, 4 · width]`` tensors (row gathers and their
scatter-add backward, the maxout's max and mask, LayerNorms, activations) and in the dispatch of
small ops, kernel calls and their Python glue than in its matrix products. Here the whole network
(branches, tables, rows, the goal action's columns, and every matrix product) is one C call forward
and one backward (written out by hand, ``_rows.c``, built on first use by :mod:`sun_lightning.native`),
inside one autograd node; the rows go in blocks of 128 spread over torch's OpenMP threads, each
block's passes in a buffer of its thread that stays in L2 (see ``_rows.c``), while a forward of fewer
than 256 rows (acting, goal selection) runs on the calling thread alone, its values then independent of
the thread count. The matrix products
call the BLAS ``sgemm_`` that ``torch.mm`` itself runs on CPU (MKL in the official wheels), looked
up in the already loaded ``libtorch_cpu``; the time spent in it is counted (:func:`gemm_time`) and
the products' shapes can be recorded (:func:`gemm_shapes`) so that benchmarks can compare an update
with its matrix products. The DQN loss calls the same C functions from its own single C call
(:mod:`sun_lightning.losses.q_loss_native`).

The maths is exactly the :class:`~sun_lightning.networks.q_network.GoalQNetwork` PyTorch path:
branches ``f = SiLU(dropout(LN(x Wᵀ)))``; rows ``pre = pre_s[oi] + pre_g[gi] + (f_s[oi] ⊙ f_g[gi]) W_pᵀ``;
``h = max over pieces``; ``a1 = leaky(LN(h))``; ``a2 = leaky(LN(a1 W2ᵀ))``; ``out = a2 W3ᵀ + b3``
(tests compare both paths' outputs and gradients). Only the dropout masks differ: the kernels
draw their own stream.
"""

from __future__ import annotations

import ctypes
import math
import sys
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from sun_lightning.native import NativeError, NativeLibrary, simd_flags

__all__ = ["QConfig", "QParams", "branch_forward", "gemm_shapes", "gemm_time", "give_buffer", "native_rows_available",
           "checked_weights", "network_dims", "optional_ptr", "param_pointers", "q_forward", "scratch_buffer", "split_grads",
           "take_buffer"]

_p, _int, _i64, _u64, _f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
_f64 = ctypes.c_double
# Selects compile to blends only without trapping math; AVX2 where PyTorch itself uses it.
_FLAGS = ("-fno-trapping-math", "-fno-math-errno", *simd_flags())
# Threads only where they are PyTorch's own: a process holds one libgomp (soname libgomp.so.1, which
# torch has loaded), so the kernels' loops run on torch's OpenMP threads. A second OpenMP runtime
# would spin against torch's on the same cores (a pthread version measured slower for that reason).
_OPENMP = (("-fopenmp",) if sys.platform.startswith("linux")
           and "parallel backend: OpenMP" in torch.__config__.parallel_info() else ())


def _torch_blas() -> tuple[int, int | None]:
    """Addresses of the Fortran BLAS ``sgemm_`` in the loaded ``libtorch_cpu`` (what ``torch.mm`` runs on CPU)
    and of MKL's ``MKL_Set_Num_Threads_Local`` (None where the BLAS is not MKL).

    Raises:
        NativeError: this torch build exports no ``sgemm_``.
    """
    for path in sorted((Path(torch.__file__).parent / "lib").glob("libtorch_cpu.*")):
        try:
            lib = ctypes.CDLL(str(path))
            gemm = ctypes.cast(lib.sgemm_, ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
        local = getattr(lib, "MKL_Set_Num_Threads_Local", None)  # the C interface (the lower-case names are Fortran's)
        return gemm, None if local is None else ctypes.cast(local, ctypes.c_void_p).value
    raise NativeError("this torch build exports no BLAS sgemm_ from libtorch_cpu (the Q network's C path needs it)")


def _init(lib: ctypes.CDLL) -> None:
    lib.rows_set_gemm(*_torch_blas())


_LOSSES = Path(__file__).parent.parent / "losses"
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_rows.c"),
    {
        # the DQN variant's loss over this network (losses/_q_loss.c, losses/q_loss_native.py)
        "q_loss_workspace": ([_p], _i64),
        "q_loss": ([_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _f32, _p, _int, _f32, _p, _p, _p,
                    _p, _int, _p, _p, _p], _int),
        "rows_set_gemm": ([_p, _p], None),
        "rows_gemm_time": ([ctypes.POINTER(_f64), ctypes.POINTER(_i64), _int], None),
        "rows_gemm_log": ([_int, _p], _int),
        "q_workspace": ([_p, _int], _i64),
        "q_net_forward": ([_p, _p, _p, _p, _p, _p, _p, _p, _f32, _p, _int, _f32, _int, _p, _p], _int),
        "q_net_backward": ([_p, _p, _p, _p, _p, _p, _p, _f32, _p, _int, _f32, _p, _p, _p, _p, _p, _p], _int),
        "branch_forward": ([_i64, _i64, _p, _p, _f32, _u64, _int, _f32, _p, _p, _p], None),
        "branch_backward": ([_i64, _i64, _p, _p, _p, _p, _u64, _int, _f32, _p, _p], _int),
        "branch_dropout_mask": ([_i64, _i64, _u64, _int, _f32, _p], None),
    },
    "The Q network's row-kernel library (_rows.c)",
    _FLAGS,
    _OPENMP,
    _init,
    (_LOSSES / "_watkins.c", _LOSSES / "_q_loss.c"),
)


def native_rows_available() -> bool:
    """Whether the C row kernels can be used (built or found in the cache); warns once if not."""
    return LIBRARY.available("Falling back to the (slower) PyTorch row path of the Q network.")


def gemm_time(reset: bool = False) -> tuple[float, int]:
    """Seconds spent in ``sgemm_`` by this module's forwards and backwards, and the number of calls,
    since the last reset (process-wide counters; ``reset`` clears them after reading). Products that
    row blocks run on several threads at once count their thread-seconds over those threads."""
    seconds, calls = _f64(), _i64()
    LIBRARY.load().rows_gemm_time(ctypes.byref(seconds), ctypes.byref(calls), int(reset))
    return seconds.value, calls.value


def gemm_shapes(record: bool) -> list[tuple[bool, bool, int, int, int]]:
    """Start (``record``) or stop logging the matrix products' shapes; returns those logged since the last
    :func:`gemm_time` reset (at most 64) as ``(transpose a, transpose b, M, N, K)`` of row-major
    ``[M, K] @ [K, N]`` products."""
    lib = LIBRARY.load()
    out = (_i64 * (64 * 5))()
    n = lib.rows_gemm_log(int(record), out)
    return [(bool(out[5 * i]), bool(out[5 * i + 1]), out[5 * i + 2], out[5 * i + 3], out[5 * i + 4]) for i in range(n)]


def optional_ptr(t: torch.Tensor | None) -> int | None:
    """A tensor's data address for the kernels, or None (NULL) for no tensor."""
    return None if t is None else t.data_ptr()


def _checked(status: int) -> None:
    """Raise for a backward kernel's non-zero status (its partial sums could not be allocated)."""
    if status:
        raise MemoryError("the Q network's row kernels could not allocate their partial sums")


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

    @cached_property
    def c_eps(self) -> ctypes.Array:
        """``eps`` as the kernels take it."""
        return (_f32 * 4)(*self.eps)

    @cached_property
    def c_seeds(self) -> ctypes.Array:
        """``seeds`` as the kernels take them."""
        return (_u64 * 2)(*self.seeds)


def network_dims(x_s: torch.Tensor, x_g: torch.Tensor, p: QParams, pieces: int) -> tuple[int, ...]:
    """``(U_s, U_g, D_s, D_g, W, pieces, |A|², |A|)`` of an evaluation of Q on tables ``x_s``, ``x_g``, the C
    kernels' dimensions (all but the row count), after checking that the weights fit the tables.

    Raises:
        ValueError: weights that are not contiguous float32 or whose shapes do not fit (the C code would
            read past them).
    """
    if not all(t.is_contiguous() and t.dtype == torch.float32 for t in p):
        raise ValueError("the C path of Q needs contiguous float32 weights")
    w, a2 = p.w2.shape[0], p.w3.shape[0]
    num_actions = math.isqrt(a2)
    expected = QParams((w, x_s.shape[1]), (w,), (w, x_g.shape[1]), (w,), (pieces * w, 3 * w), (w,), (w, w), (w,),
                       (a2, w), (a2,))
    if num_actions**2 != a2 or any(tuple(t.shape) != e for t, e in zip(p, expected)):
        raise ValueError(f"weights of shapes {[tuple(t.shape) for t in p]} do not fit tables of {x_s.shape[1]} and "
                         f"{x_g.shape[1]} features ({pieces} maxout pieces); expected {list(expected)}")
    return x_s.shape[0], x_g.shape[0], x_s.shape[1], x_g.shape[1], w, pieces, a2, num_actions


def param_pointers(p: QParams) -> ctypes.Array:
    """The weights' addresses in the kernels' order (``QParams``')."""
    return (_p * 10)(*(t.data_ptr() for t in p))


_CHECKED: dict[tuple, tuple[tuple[int, ...], ctypes.Array]] = {}
_CHECKED_MAX = 64  # weight sets remembered (an ensemble's members are one set each)


def checked_weights(x_s: torch.Tensor, x_g: torch.Tensor, p: QParams, pieces: int) -> tuple[tuple[int, ...], ctypes.Array]:
    """:func:`network_dims` and :func:`param_pointers`, the check remembered for the weights' addresses, shapes,
    dtypes and layout (what the C side's reads depend on): acting and goal selection call Q a few times per
    env step with the same weights, and the check cost more than a 4-row evaluation's C call."""
    key = (x_s.shape[1], x_g.shape[1], pieces, *[(t.data_ptr(), t.shape, t.dtype, t.is_contiguous()) for t in p])
    hit = _CHECKED.get(key)
    if hit is None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        hit = _CHECKED[key] = (network_dims(x_s, x_g, p, pieces)[2:], param_pointers(p))
    return (x_s.shape[0], x_g.shape[0], *hit[0]), hit[1]


class _Buffers(threading.local):
    """Float32 buffers of the C calls, reused across calls and updates (one set per thread: ctypes releases
    the GIL during a call). Fresh multi-MB allocations come from the kernel as untouched pages, whose
    first writes cost twice the writes themselves here (page faults): ~1.5 ms per update when each call
    allocated its own."""

    def __init__(self) -> None:
        self.scratch: torch.Tensor | None = None
        self.pool: list[torch.Tensor] = []


_BUFFERS = _Buffers()
_POOL_SIZE = 8  # workspaces kept for reuse (several forwards may await their backwards at once)


def scratch_buffer(floats: int) -> torch.Tensor:
    """A buffer of at least ``floats`` floats whose contents live only until the next call of this function."""
    buf = _BUFFERS.scratch
    if buf is None or buf.numel() < floats:
        buf = _BUFFERS.scratch = torch.empty(floats, dtype=torch.float32)
    return buf


def take_buffer(floats: int) -> torch.Tensor:
    """A buffer of at least ``floats`` floats owned by the caller until it hands it back (:func:`give_buffer`)."""
    pool = _BUFFERS.pool
    for i, buf in enumerate(pool):
        if buf.numel() >= floats:
            return pool.pop(i)
    return torch.empty(floats, dtype=torch.float32)  # the C side reads floats whatever the default dtype


def give_buffer(buf: torch.Tensor) -> None:
    """Return a buffer of :func:`take_buffer` for reuse; nothing may read or write it afterwards."""
    if len(_BUFFERS.pool) < _POOL_SIZE:
        _BUFFERS.pool.append(buf)


class _Call:
    """The C arguments of one evaluation of Q, kept by the autograd node for its backward."""

    __slots__ = ("dims", "rows", "num_actions", "params", "eps", "seeds", "cfg", "x_s", "x_g", "oi", "gi", "ga",
                 "workspace")

    def __init__(self, x_s, x_g, p: QParams, oi, gi, ga, cfg: QConfig) -> None:
        rows = oi.numel() if oi is not None else gi.numel() if gi is not None else x_s.shape[0]
        (us, ug, ds, dg, w, pieces, a2, self.num_actions), self.params = checked_weights(x_s, x_g, p, cfg.pieces)
        self.rows = rows
        self.dims = (_i64 * 9)(us, ug, ds, dg, rows, w, pieces, a2, self.num_actions)
        self.eps, self.seeds, self.cfg = cfg.c_eps, cfg.c_seeds, cfg
        self.x_s, self.x_g, self.oi, self.gi, self.ga = x_s, x_g, oi, gi, ga
        self.workspace: torch.Tensor | None = None

    def forward(self, save: bool) -> torch.Tensor:
        """``[R, |A|]`` at the goal actions, or ``[R, |A|²]``; with ``save`` the workspace keeps what the backward needs."""
        lib, cfg = LIBRARY.load(), self.cfg
        size = lib.q_workspace(self.dims, 0)
        ws = take_buffer(size) if save else scratch_buffer(size)
        sel = ws.new_empty(self.rows, self.num_actions) if self.ga is not None else None
        index = [optional_ptr(i) for i in (self.oi, self.gi, self.ga)]
        status = lib.q_net_forward(self.dims, self.x_s.data_ptr(), self.x_g.data_ptr(), self.params, *index, self.eps,
                                   cfg.slope, self.seeds, cfg.threshold,
                                   cfg.keep_scale, int(save), ws.data_ptr(), optional_ptr(sel))
        if status == -1:
            raise IndexError(f"row index out of range: tables of {self.x_s.shape[0]} states and {self.x_g.shape[0]} goals")
        if status == -2:
            raise IndexError(f"a goal action is outside [0, {self.num_actions})")
        if status == -6:
            raise ValueError(f"the C path of Q takes at most 8 maxout pieces, got {cfg.pieces}")
        if status:
            raise NativeError("the Q network's C path has no sgemm_")
        if save:
            self.workspace = ws
        if sel is not None:
            return sel
        width = self.num_actions**2
        return ws[size - self.rows * width:size].view(self.rows, width).clone()  # the layout's last block

    def backward(self, grad: torch.Tensor, params: QParams, need_inputs) -> tuple:
        """Gradients of :meth:`forward`'s output: the encoded tables' (where ``need_inputs``) and ``QParams``'."""
        lib, cfg = LIBRARY.load(), self.cfg
        flat = grad.new_empty(sum(t.numel() for t in params))
        g_x_s = torch.empty_like(self.x_s) if need_inputs[0] else None
        g_x_g = torch.empty_like(self.x_g) if need_inputs[1] else None
        tmp = scratch_buffer(lib.q_workspace(self.dims, 1))
        index = [optional_ptr(i) for i in (self.oi, self.gi, self.ga)]
        status = lib.q_net_backward(self.dims, self.x_s.data_ptr(), self.x_g.data_ptr(), self.params, *index, cfg.slope,
                                    self.seeds, cfg.threshold, cfg.keep_scale,
                                    self.workspace.data_ptr(), grad.contiguous().data_ptr(), tmp.data_ptr(),
                                    flat.data_ptr(), optional_ptr(g_x_s), optional_ptr(g_x_g))
        _checked(status)
        give_buffer(self.workspace)
        self.workspace = None
        return g_x_s, g_x_g, split_grads(flat, params)


def split_grads(flat: torch.Tensor, params: QParams) -> QParams:
    """The weights' gradients as views of the kernels' flat gradient (QParams' order and shapes)."""
    return QParams(*torch._utils._unflatten_dense_tensors(flat, params))  # one call for the ten views


class _Q(torch.autograd.Function):
    """The whole of Q after its encoders as one autograd node (forward and backward by hand, one C call each)."""

    @staticmethod
    def forward(ctx, x_s, x_g, oi, gi, ga, cfg, *params):
        call = _Call(x_s, x_g, QParams(*params), oi, gi, ga, cfg)
        out = call.forward(save=True)
        ctx.save_for_backward(x_s, x_g, *params)  # version checks: in-place changes before the backward raise
        ctx.call = call
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x_s, x_g, *params = ctx.saved_tensors
        g_x_s, g_x_g, g_params = ctx.call.backward(grad, QParams(*params), ctx.needs_input_grad[:2])
        ctx.call = None
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
    oi, gi = _indices(obs_index), _indices(goal_index)
    ga = None
    if goal_action is not None:
        rows = oi.numel() if oi is not None else gi.numel() if gi is not None else x_s.shape[0]
        if goal_action.numel() != rows:
            raise ValueError(f"goal_action has {goal_action.numel()} entries for {rows} rows")
        ga = _indices(goal_action.reshape(-1))
    x_s, x_g = x_s.contiguous(), x_g.contiguous()
    if torch.is_grad_enabled() and (x_s.requires_grad or x_g.requires_grad or any(t.requires_grad for t in params)):
        out = _Q.apply(x_s, x_g, oi, gi, ga, cfg, *params)
    else:
        out = _Call(x_s, x_g, params, oi, gi, ga, cfg).forward(save=False)
    if ga is not None:
        return out
    num_actions = math.isqrt(params.w3.shape[0])
    return out.unflatten(-1, (num_actions, num_actions))


def _indices(index: torch.Tensor | None) -> torch.Tensor | None:
    """Row indices as the C side reads them: contiguous int64 (no copy where they are already)."""
    if index is None or (index.dtype == torch.int64 and index.is_contiguous()):
        return index
    return index.to(torch.int64).contiguous()


# ---- the branches: SiLU(dropout(LayerNorm(h))) -------------------------------------------------
def _branch(h, ln_w, eps, seed, threshold, keep_scale, save):
    """The branch kernel's output, and ``(xhat, rstd)`` for the backward when ``save``."""
    out = torch.empty_like(h)
    xhat, rstd = (torch.empty_like(h), h.new_empty(h.shape[0])) if save else (None, None)
    LIBRARY.load().branch_forward(h.shape[0], h.shape[1], h.data_ptr(), ln_w.data_ptr(), eps, seed, threshold,
                                  keep_scale, out.data_ptr(), optional_ptr(xhat), optional_ptr(rstd))
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
