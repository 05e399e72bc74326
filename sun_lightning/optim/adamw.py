"""AdamW with the gradient-norm clip inside its step, as one C pass on CPU (SPEC §5a's learner step).

An update of the DQN variant ends with a clip of the gradient norm (1.0), an AdamW step and the
target's Polyak step. Through ``LightningModule.clip_gradients`` and ``torch.optim.AdamW`` the
first two cost ~0.55 ms per update on the 2-core CPU machine (10 parameter tensors, dozens of
small ops and Python bookkeeping), a tenth of the update. :class:`ClippedAdamW` is
``torch.optim.AdamW`` (same hyperparameters, same state, so checkpoints load either way) whose
``step`` first scales the gradients to a global norm of at most ``max_grad_norm``, exactly as
``torch.nn.utils.clip_grad_norm_``; on CPU float32 tensors both run in ``_adamw.c`` (two passes
in all), elsewhere (GPU, other dtypes, no compiler) through torch's own functions.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from pathlib import Path

import torch

from sun_lightning.native import NativeLibrary

__all__ = ["ClippedAdamW"]

_p, _i64, _f32, _f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_double
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_adamw.c"),
    {
        "sq_norm": ([_i64, _p, _p], _f64),
        "adamw_step": ([_i64, _p, _p, _p, _p, _p, _p, _p, _f32, _f32, _f32, _f32, _f32, _f32], None),
    },
    "ClippedAdamW's CPU step (_adamw.c)",
    # sqrtf inlined (no errno) so that the step's loop vectorizes: ~10x faster than libm calls
    ("-fno-math-errno", "-fno-trapping-math"),
)


class ClippedAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose ``step`` clips the global gradient norm first.

    Args:
        params: parameters or parameter groups.
        lr, betas, eps, weight_decay: AdamW's (``torch.optim.AdamW``).
        max_grad_norm: the clip: gradients are scaled by ``min(1, max_grad_norm / (norm + 1e-6))``
            (``clip_grad_norm_``'s rule; the 2-norm over all parameters with a gradient); ``None``: no clip.

    The gradients themselves are left unscaled on the C path (the step reads them scaled); on the
    fallback path ``clip_grad_norm_`` scales them in place. AMP's gradient scaler unscales before
    ``step`` (this optimizer is not "fused"), so the clip always sees true gradients.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        max_grad_norm: float | None = None,
    ) -> None:
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be positive, got {max_grad_norm}")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm

    def _native(self, params: list[torch.Tensor]) -> bool:
        return all(
            p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous() and p.grad.is_contiguous()
            and not p.grad.is_sparse and p.grad.dtype == torch.float32 for p in params
        ) and not any(g["amsgrad"] or g["maximize"] or g["capturable"] or g["differentiable"] for g in self.param_groups
                      ) and LIBRARY.available("ClippedAdamW falls back to torch's clip_grad_norm_ and AdamW.")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return loss
        if not self._native(params):
            if self.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
            super().step()
            return loss
        lib = LIBRARY.load()
        # Per group: its parameters with a gradient, their sizes and gradient pointers (shared by both passes).
        groups = []
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if ps:
                n = len(ps)
                groups.append((group, ps, (_i64 * n)(*(p.numel() for p in ps)), (_p * n)(*(p.grad.data_ptr() for p in ps))))
        coef = 1.0
        if self.max_grad_norm is not None:
            norm = math.sqrt(sum(lib.sq_norm(len(ps), numel, grads) for _, ps, numel, grads in groups))
            coef = min(1.0, self.max_grad_norm / (norm + 1e-6))
        for group, ps, numel, grads in groups:
            self._native_group(lib, group, ps, numel, grads, coef)
        return loss

    def _native_group(self, lib: ctypes.CDLL, group: dict, params: list[torch.Tensor], numel, grads, coef: float) -> None:
        beta1, beta2 = group["betas"]
        lr = group["lr"]
        lr = float(lr) if not isinstance(lr, torch.Tensor) else float(lr.item())
        states = []
        for p in params:
            state = self.state[p]
            if not state:  # torch.optim.AdamW's lazy initialization (non-capturable, non-fused)
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            states.append(state)
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1.0)
        counts = torch.stack(steps).tolist()
        n = len(params)
        param_ptrs, exp_avg, exp_avg_sq = ((_p * n)(*(t.data_ptr() for t in ts)) for ts in (
            params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]))
        step_size = (_f32 * n)(*(lr / (1.0 - beta1**c) for c in counts))
        bc2_sqrt = (_f32 * n)(*(math.sqrt(1.0 - beta2**c) for c in counts))
        lib.adamw_step(n, numel, param_ptrs, grads, exp_avg, exp_avg_sq, step_size, bc2_sqrt, coef,
                       1.0 - lr * group["weight_decay"], 1.0 - beta1, beta2, 1.0 - beta2, group["eps"])
