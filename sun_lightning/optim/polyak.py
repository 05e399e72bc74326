"""The target network's Polyak step, target ← (1 − τ) target + τ online (SPEC §5a: τ = 0.001 every update).

``torch._foreach_lerp_`` runs one kernel per tensor on CPU (~10 dispatched ops per update); on CPU
float32 tensors this is one C pass over all of them (``_adamw.c``'s ``lerp_tensors``, torch.lerp's
formula), elsewhere torch's own.
"""

from __future__ import annotations

import torch

from sun_lightning.optim._native import LIBRARY, native_tensors, pointers, sizes

__all__ = ["polyak_"]


@torch.no_grad()
def polyak_(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``targets[k] ← targets[k] + τ (sources[k] − targets[k])`` in place, for 0 ≤ τ < 0.5 on the C path."""
    if len(targets) != len(sources) or any(t.shape != s.shape for t, s in zip(targets, sources)):
        raise ValueError("Polyak averaging needs one source of the same shape per target")
    if 0.0 <= tau < 0.5 and native_tensors(targets) and native_tensors(sources) and LIBRARY.available(
            "Polyak averaging falls back to torch._foreach_lerp_."):
        LIBRARY.load().lerp_tensors(len(targets), sizes(targets), pointers(targets), pointers(sources), tau)
    else:
        torch._foreach_lerp_(targets, sources, tau)
