"""Which numeric precision a run trains in: bf16 matrix products where the hardware has bf16 units.

Lightning's switch ``--trainer.precision bf16-mixed`` runs the learner's ``training_step`` under
``torch.autocast`` (bf16 matrix products; the learners keep TD(λ) returns, losses, the critic's
softplus, optimizer state and Polyak updates in float32). Acting and goal selection run under the
same context (:meth:`~sun_lightning.learners.base.Learner.inference_context`).

bf16 pays only where the hardware multiplies bf16 matrices natively: AMX or AVX512-BF16 on x86
CPUs, any CUDA GPU that supports bf16. Elsewhere CPU autocast emulates bf16 and is far slower than
float32 (pytorch/pytorch#118499), so it is never chosen there. Configs opt in with
``auto_bf16: true``; an explicit ``--trainer.precision`` always wins.
"""

from __future__ import annotations

import torch

#: What ``auto_bf16`` chooses when the hardware has (or lacks) bf16 matrix units.
BF16, FP32 = "bf16-mixed", "32-true"


def bf16_units(device_type: str) -> str | None:
    """A short description of the bf16 matrix units of the device type (``cpu`` or ``cuda``), or ``None``."""
    if device_type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False):
            return f"{torch.cuda.get_device_name()} (CUDA bf16)"
        return None
    if torch.cpu._is_amx_tile_supported():
        return "this CPU's AMX units"
    if torch.cpu._is_avx512_bf16_supported():
        return "this CPU's AVX512-BF16 instructions"
    return None


def accelerator_type(accelerator: object) -> str:
    """``cpu`` or ``cuda``: where Lightning's ``trainer.accelerator`` setting puts the learner."""
    name = str(accelerator or "auto").lower()
    if "gpu" in name or "cuda" in name:
        return "cuda"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cpu"


def choose(accelerator: object, requested: object) -> tuple[str, str]:
    """The precision of a run whose config asks for ``auto_bf16``, and the one line that says why.

    Args:
        accelerator: the ``trainer.accelerator`` setting.
        requested: the ``trainer.precision`` setting (``None`` when not given).
    """
    device = accelerator_type(accelerator)
    if requested is not None:
        return str(requested), f"precision: {requested} (as --trainer.precision asks)"
    units = bf16_units(device)
    if units is None:
        return FP32, (f"precision: {FP32} (no bf16 matrix units on this {device.upper()}: bf16 would be slower; "
                      f"--trainer.precision {BF16} forces it)")
    return BF16, f"precision: {BF16} (bf16 matrix products on {units}; --trainer.precision {FP32} for float32)"
