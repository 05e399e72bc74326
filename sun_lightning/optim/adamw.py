"""AdamW with the gradient-norm clip inside its step, as one C pass on CPU (SPEC §5a's learner step).

An update of the DQN variant ends with a clip of the gradient norm (1.0), an AdamW step and the
target's Polyak step. Through ``LightningModule.clip_gradients`` and ``torch.optim.AdamW`` the
first two cost ~0.55 ms per update on the 2-core CPU machine (10 parameter tensors, dozens of
small ops and Python bookkeeping), a tenth of the update. :class:`ClippedAdamW` is
``torch.optim.AdamW`` (same hyperparameters, same state, so checkpoints load either way) whose
``step`` first scales the gradients to a global norm of at most ``max_grad_norm``, exactly as
``torch.nn.utils.clip_grad_norm_``; on CPU float32 tensors both run in ``_adamw.c`` (two passes
in all, the step counters and bias corrections included), elsewhere (GPU, other dtypes, no
compiler) through torch's own functions. It can also carry the target network's Polyak step
(``polyak``), which then runs in the step's own pass while the new parameters are in cache.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from sun_lightning.optim._native import LIBRARY, native_tensors, pointers, sizes
from sun_lightning.optim.polyak import polyak_

__all__ = ["ClippedAdamW"]


class _Group:
    """One parameter group's C arguments: everything but the gradients, which are new every step."""

    def __init__(self, group: dict, params: list[torch.Tensor], states: list[dict],
                 follow: list[torch.Tensor] | None) -> None:
        self.group, self.params = group, params
        self.numel, self.param_ptrs = sizes(params), pointers(params)
        self.exp_avg = pointers([s["exp_avg"] for s in states])
        self.exp_avg_sq = pointers([s["exp_avg_sq"] for s in states])
        self.steps = pointers([s["step"] for s in states])
        self.follow = None if follow is None else pointers(follow)
        self.addresses = [t.data_ptr() for t in (follow or [])]  # checked each step: the followers may move


class ClippedAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose ``step`` clips the global gradient norm first.

    Args:
        params: parameters or parameter groups.
        lr, betas, eps, weight_decay: AdamW's (``torch.optim.AdamW``).
        max_grad_norm: the clip: gradients are scaled by ``min(1, max_grad_norm / (norm + 1e-6))``
            (``clip_grad_norm_``'s rule; the 2-norm over all parameters with a gradient); ``None``: no clip.
        polyak: ``(targets, tau)``: after every step each target tensor takes a Polyak step towards its
            parameter (the parameters in order, one target each, same shapes):
            ``target ← target + τ (param − target)``, as :func:`~sun_lightning.optim.polyak_` — on the C
            path in the same pass as the step (the target network of SPEC §5a, updated every step).
            Parameters without a gradient leave their targets alone.

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
        polyak: tuple[Iterable[torch.Tensor], float] | None = None,
    ) -> None:
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be positive, got {max_grad_norm}")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.polyak: tuple[dict[torch.Tensor, torch.Tensor], float] | None = None
        if polyak is not None:
            targets, tau = polyak
            targets = list(targets)
            params = [p for group in self.param_groups for p in group["params"]]
            if len(targets) != len(params) or any(t.shape != p.shape for t, p in zip(targets, params)):
                raise ValueError("polyak needs one target of its parameter's shape per parameter, in order")
            if not 0.0 <= tau <= 1.0:
                raise ValueError(f"polyak's tau must be in [0, 1], got {tau}")
            self.polyak = ({p: t for p, t in zip(params, targets)}, float(tau))
        self._groups: list[_Group] | None = None  # the C arguments of the last step's parameters

    # Anything that may replace parameters or state tensors drops the cached addresses.
    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        self._groups = None

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._groups = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (``set_to_none``, the default) without torch's per-call bookkeeping, or zero them."""
        if not set_to_none:
            return super().zero_grad(set_to_none=False)
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self._native_groups()
        if groups is None:
            params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
            if params and self.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
            super().step()
            if params and self.polyak is not None:
                targets, tau = self.polyak
                polyak_([targets[p] for p in params], params, tau)
            return loss
        lib = LIBRARY.load()
        grads = [pointers([p.grad for p in g.params]) for g in groups]
        coef = 1.0
        if self.max_grad_norm is not None:
            norm = math.sqrt(sum(lib.sq_norm(len(g.params), g.numel, ptrs) for g, ptrs in zip(groups, grads)))
            coef = min(1.0, self.max_grad_norm / (norm + 1e-6))
        for g, ptrs in zip(groups, grads):
            group = g.group
            beta1, beta2 = group["betas"]
            lr = group["lr"]
            lr = float(lr) if not isinstance(lr, torch.Tensor) else float(lr.item())
            tau = self.polyak[1] if self.polyak is not None else 0.0
            lib.adamw_step(len(g.params), g.numel, g.param_ptrs, ptrs, g.exp_avg, g.exp_avg_sq, g.steps, lr, beta1,
                           beta2, coef, 1.0 - lr * group["weight_decay"], group["eps"], g.follow, tau)
        return loss

    def _native_groups(self) -> list[_Group] | None:
        """The groups' C arguments for this step's parameters with a gradient, or None where torch's path runs."""
        with_grad = [[p for p in group["params"] if p.grad is not None] for group in self.param_groups]
        groups = self._groups
        cached = [p for g in groups for p in g.params] if groups is not None else None
        current = [p for ps in with_grad for p in ps]
        if (cached is None or len(cached) != len(current) or any(a is not b for a, b in zip(cached, current))
                or any(g.addresses != [self.polyak[0][p].data_ptr() for p in g.params] for g in groups if g.follow)):
            groups = self._groups = self._build_groups(with_grad)
        if groups is None or not native_tensors(p.grad for g in groups for p in g.params):
            return None
        return groups

    def _build_groups(self, with_grad: list[list[torch.Tensor]]) -> list[_Group] | None:
        flags = ("amsgrad", "maximize", "capturable", "differentiable", "foreach", "fused")
        if any(group.get(f) for group in self.param_groups for f in flags) or not native_tensors(
                p for ps in with_grad for p in ps) or not LIBRARY.available(
                "ClippedAdamW falls back to torch's clip_grad_norm_ and AdamW."):
            return None
        out = []
        for group, params in zip(self.param_groups, with_grad):
            if not params:
                continue
            states = []
            for p in params:
                state = self.state[p]
                if not state:  # torch.optim.AdamW's lazy initialization (non-capturable, non-fused)
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                states.append(state)
            if not native_tensors(t for s in states for t in (s["step"], s["exp_avg"], s["exp_avg_sq"])):
                return None
            follow = None if self.polyak is None else [self.polyak[0][p] for p in params]
            if follow is not None and (not native_tensors(follow) or not 0.0 <= self.polyak[1] < 0.5):
                return None  # (lerp's formula for tau >= 0.5 differs: torch's path then)
            out.append(_Group(group, params, states, follow))
        return out
