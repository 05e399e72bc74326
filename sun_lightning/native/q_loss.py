"""The DQN variant's loss (SPEC §5a) and its gradient in one C call: the one native seam of the learners.

``DQNSVF(backend="native" | "auto")`` routes :meth:`~sun_lightning.learners.dqn.DQNSVF.loss_and_stats`
here on CPU; ``DQNSVF.td_targets`` with ``F.huber_loss`` is the torch path, the reference that the tests
compare this kernel with, and the path on every other device. The kernel computes, in one call: the
rows at which Q is needed, the online network with dropout and the target network without, the
Watkins TD(λ) targets, Q(s_t, a_t, g_t), the mean Huber loss and its statistics, then the backward
through the online network while its activations are still in cache; the autograd node's backward
only hands that gradient over. Its products call the BLAS ``sgemm_`` that ``torch.mm`` runs on CPU
(looked up in the loaded ``libtorch_cpu``); its rows go in blocks spread over torch's OpenMP threads,
with per-block partial sums added in block order, so results do not depend on the thread count.
The sources (``_rows.c``, ``_watkins.c``, ``_q_loss.c``) are built on first use by
:mod:`sun_lightning.native`; measured gains are in ``BENCHMARKS.md``.

Only the branches' dropout masks differ from the torch path: the kernel draws its own stream.
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import torch
from tensordict import TensorDictBase
from torch import nn
from torch.autograd.function import once_differentiable

from sun_lightning import keys
from sun_lightning.native import NativeError, NativeLibrary, simd_flags

__all__ = ["QConfig", "QParams", "available", "config_of", "params_of", "q_loss", "table_q_loss"]

_p, _int, _i64, _u64, _f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
# Selects compile to blends only without trapping math; AVX2 where PyTorch itself uses it.
_FLAGS = ("-fno-trapping-math", "-fno-math-errno", *simd_flags())
# Threads only where they are PyTorch's own: a process holds one libgomp (which torch has loaded), so the
# kernel's loops run on torch's OpenMP threads instead of a second runtime spinning against them.
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
    raise NativeError("this torch build exports no BLAS sgemm_ from libtorch_cpu (the DQN loss kernel needs it)")


def _init(lib: ctypes.CDLL) -> None:
    lib.rows_set_gemm(*_torch_blas())


_HERE = Path(__file__).parent
LIBRARY = NativeLibrary(
    _HERE / "_rows.c",
    {
        "q_loss_workspace": ([_p], _i64),
        "q_loss": ([_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _f32, _p, _int, _f32, _p, _p, _p,
                    _p, _int, _p, _p, _p], _int),
        "rows_set_gemm": ([_p, _p], None),
    },
    "The DQN loss kernel (_rows.c, _watkins.c, _q_loss.c)",
    _FLAGS,
    _OPENMP,
    _init,
    (_HERE / "_watkins.c", _HERE / "_q_loss.c"),
)

_ERRORS = {
    -1: (IndexError, "a row index of the batch is outside the state or goal table"),
    -2: (IndexError, "a goal action is outside the action set"),
    -3: (RuntimeError, "the DQN loss kernel has no sgemm_"),
    -4: (IndexError, "an action is outside the action set"),
    -5: (MemoryError, "the loss kernel could not allocate its partial sums"),
    -6: (ValueError, "the DQN loss kernel takes at most 8 maxout pieces"),
}


def available() -> bool:
    """Whether the kernel builds (or is cached); the first failure warns once, naming the torch path instead."""
    return LIBRARY.available("The DQN learner runs its torch path (backend 'torch').")


class QParams(NamedTuple):
    """The weights of :class:`~sun_lightning.networks.q_network.GoalQNetwork` in the kernel's order."""

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
        threshold, keep_scale: the branches' dropout (round(p · 65536), 1 / (1 − p)); 0 and 1: none.
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
        return (_f32 * 4)(*self.eps)

    @cached_property
    def c_seeds(self) -> ctypes.Array:
        return (_u64 * 2)(*self.seeds)


def params_of(net: nn.Module) -> QParams:
    """A ``GoalQNetwork``'s weights in the kernel's order."""
    ln1, _, lin2, ln2, _, lin3 = net.head
    return QParams(net.state_branch.linear.weight, net.state_branch.norm.weight, net.goal_branch.linear.weight,
                   net.goal_branch.norm.weight, net.maxout.linear.weight, ln1.weight, lin2.weight, ln2.weight,
                   lin3.weight, lin3.bias)


def config_of(net: nn.Module, dropout: bool) -> QConfig:
    """A ``GoalQNetwork``'s settings; with ``dropout``, its branches' rate and two seeds from torch's generator."""
    ln1, act, _, ln2, _, _ = net.head
    eps = (net.state_branch.norm.eps, net.goal_branch.norm.eps, ln1.eps, ln2.eps)
    p = net.state_branch.dropout if dropout else 0.0
    if p <= 0:
        return QConfig(eps, act.negative_slope, net.maxout.pieces)
    seeds = tuple(torch.randint(0, 2**62, (2,)).tolist())
    return QConfig(eps, act.negative_slope, net.maxout.pieces, round(p * 65536), 1.0 / (1.0 - p), seeds)


def _dims(x_s: torch.Tensor, x_g: torch.Tensor, p: QParams, pieces: int) -> tuple[int, ...]:
    """``(U_s, U_g, D_s, D_g, W, pieces, |A|², |A|)``, after checking that the weights fit the tables.

    Raises:
        ValueError: weights that are not contiguous float32 or whose shapes do not fit (the C code would
            read past them).
    """
    if not all(t.is_contiguous() and t.dtype == torch.float32 for t in p):
        raise ValueError("the DQN loss kernel needs contiguous float32 weights")
    w, a2 = p.w2.shape[0], p.w3.shape[0]
    num_actions = math.isqrt(a2)
    expected = QParams((w, x_s.shape[1]), (w,), (w, x_g.shape[1]), (w,), (pieces * w, 3 * w), (w,), (w, w), (w,),
                       (a2, w), (a2,))
    if num_actions**2 != a2 or any(tuple(t.shape) != e for t, e in zip(p, expected)):
        raise ValueError(f"weights of shapes {[tuple(t.shape) for t in p]} do not fit tables of {x_s.shape[1]} and "
                         f"{x_g.shape[1]} features ({pieces} maxout pieces); expected {list(expected)}")
    return x_s.shape[0], x_g.shape[0], x_s.shape[1], x_g.shape[1], w, pieces, a2, num_actions


def _column(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if x.dtype is dtype and x.is_contiguous() else x.to(dtype).contiguous()


class _Scratch:
    """One float32 buffer reused across calls: fresh multi-MB allocations come as untouched pages whose first
    writes fault."""

    buffer: torch.Tensor | None = None

    @classmethod
    def get(cls, floats: int) -> torch.Tensor:
        if cls.buffer is None or cls.buffer.numel() < floats:
            cls.buffer = torch.empty(floats, dtype=torch.float32)
        return cls.buffer


class _LossCall:
    """The C arguments of one loss evaluation."""

    def __init__(self, x_s, x_g, xt_s, xt_g, params: QParams, target_params: QParams, cfg: QConfig,
                 batch: TensorDictBase, hyper: tuple[float, float, float, float, float]) -> None:
        action = batch[keys.ACTION]
        n, t = action.shape
        dims = _dims(x_s, x_g, params, cfg.pieces)
        if _dims(xt_s, xt_g, target_params, cfg.pieces) != dims:
            raise ValueError("the target network's tables and weights differ in shape from the online network's")
        self.shape = (_i64 * 10)(n, t, *dims)
        self.params = (_p * 10)(*(w.data_ptr() for w in params))
        self.target_params = (_p * 10)(*(w.data_ptr() for w in target_params))
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
        scratch = _Scratch.get(lib.q_loss_workspace(self.shape))
        loss, stats = torch.empty((), dtype=torch.float32), torch.empty(4, dtype=torch.float32)
        flat = g_x_s = g_x_g = None
        if params is not None:
            flat = torch.empty(sum(t.numel() for t in params), dtype=torch.float32)
            g_x_s = torch.empty_like(self.x_s) if need_inputs[0] else None
            g_x_g = torch.empty_like(self.x_g) if need_inputs[1] else None
        status = lib.q_loss(
            self.shape, self.x_s.data_ptr(), self.x_g.data_ptr(), self.xt_s.data_ptr(), self.xt_g.data_ptr(),
            self.params, self.target_params, *[c.data_ptr() for c in self.batch], cfg.c_eps, cfg.slope, cfg.c_seeds,
            cfg.threshold, cfg.keep_scale, self.hyper, scratch.data_ptr(), loss.data_ptr(), stats.data_ptr(),
            int(flat is not None), *(None if x is None else x.data_ptr() for x in (flat, g_x_s, g_x_g)))
        if status:
            error, message = _ERRORS.get(status, (RuntimeError, f"the loss kernel failed ({status})"))
            raise error(message)
        grads = None
        if flat is not None:  # the weights' gradients as views of the flat one, in QParams' order
            grads = (flat, g_x_s, g_x_g, QParams(*torch._utils._unflatten_dense_tensors(flat, params)))
        return loss, stats, grads


class _QLoss(torch.autograd.Function):
    """The loss as one autograd node: the C call that computes it also computes its gradient (at
    ``d output = 1``), and the backward only scales it by the output's gradient (exact for 1)."""

    @staticmethod
    def forward(ctx, call: _LossCall, x_s, x_g, *params):
        loss, stats, ctx.grads = call.run(QParams(*params), (x_s.requires_grad, x_g.requires_grad))
        ctx.mark_non_differentiable(stats)
        return loss, stats

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _grad_stats):
        (flat, g_x_s, g_x_g, grads), ctx.grads = ctx.grads, None
        if grad_loss.item() != 1.0:
            flat.mul_(grad_loss)  # the weights' gradients are views of flat
            g_x_s, g_x_g = (None if g is None else g.mul_(grad_loss) for g in (g_x_s, g_x_g))
        return (None, g_x_s, g_x_g, *grads)


def q_loss(net: nn.Module, target_net: nn.Module, batch: TensorDictBase, gamma: float, lam: float,
           bootstrap_clip: float | None, tol: float, huber_delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean Huber loss of Q(s_t, a_t, g_t) against Watkins TD(λ) targets, and its statistics (SPEC §5a).

    Args:
        net, target_net: the online ``GoalQNetwork`` (run with its dropout) and its target (without).
        batch: a relabelled ``[N, T]`` batch (``SegmentedHindsightSampler``), float32 tables on the CPU.
        gamma, lam, bootstrap_clip, tol: as ``DQNSVF.td_targets`` (``tol`` = 1 − γ in the paper).
        huber_delta: the Huber loss's δ.

    Returns:
        The loss (0-dim, differentiable with respect to the online network's weights and encoders) and the
        statistics ``[4]`` (no grad): the loss, mean Q(s_t, a_t, g_t), mean target, fraction of traces kept.
    """
    states, goals = batch[keys.STATES], batch[keys.GOALS]
    x_s, x_g = net.encode(states, goals)
    with torch.no_grad():
        xt_s, xt_g = target_net.encode(states, goals)
    return table_q_loss((x_s, x_g), (xt_s, xt_g), params_of(net), params_of(target_net), config_of(net, True), batch,
                        gamma, lam, bootstrap_clip, tol, huber_delta)


def table_q_loss(encoded: tuple[torch.Tensor, torch.Tensor], target_encoded: tuple[torch.Tensor, torch.Tensor],
                 params: QParams, target_params: QParams, cfg: QConfig, batch: TensorDictBase, gamma: float,
                 lam: float, bootstrap_clip: float | None, tol: float, huber_delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`q_loss` from the batch's encoded tables φ(s), φ(g_s) (online and target) and weights given apart
    from a module: an ensemble member's slice of stacked weights, whose gradient lands in that slice."""
    (x_s, x_g), (xt_s, xt_g) = encoded, target_encoded
    clip = float("inf") if bootstrap_clip is None else bootstrap_clip
    call = _LossCall(x_s.contiguous(), x_g.contiguous(), xt_s.contiguous(), xt_g.contiguous(), params, target_params,
                     cfg, batch, (gamma, lam, clip, tol, huber_delta))
    if torch.is_grad_enabled() and (x_s.requires_grad or x_g.requires_grad or any(t.requires_grad for t in params)):
        return _QLoss.apply(call, call.x_s, call.x_g, *params)
    loss, stats, _ = call.run(None)
    return loss, stats
