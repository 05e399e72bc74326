"""Runs packed onto GPUs: ``--gpus-per-run`` for the local launcher, as Ray's ``num_gpus`` for its tasks.

A share below one packs several runs onto one GPU (0.25: four runs per GPU), a whole number gives each run
that many GPUs of its own. The local launcher hands each run its devices through ``CUDA_VISIBLE_DEVICES``
(each run then sees its GPU as ``cuda:0``), as Ray does for a task; the run itself is told to train on
the GPU with :func:`accelerator_args`.
"""

from __future__ import annotations

import math
import os


def check_share(gpus_per_run: float) -> float:
    """``gpus_per_run`` if Ray would accept it as ``num_gpus``: a fraction in (0, 1] or a whole number above 1.

    Raises:
        ValueError: naming the value.
    """
    if not gpus_per_run > 0 or not math.isfinite(gpus_per_run):
        raise ValueError(f"--gpus-per-run must be positive, got {gpus_per_run:g}")
    if gpus_per_run > 1 and gpus_per_run != int(gpus_per_run):
        raise ValueError(f"--gpus-per-run above 1 must be a whole number of GPUs, got {gpus_per_run:g}")
    return float(gpus_per_run)


def runs_per_gpu(gpus_per_run: float) -> int:
    """How many runs of a fractional share fit one GPU (1 for whole GPUs)."""
    share = check_share(gpus_per_run)
    return 1 if share >= 1 else int(math.floor(1.0 / share + 1e-9))


def accelerator_args(gpus_per_run: float) -> tuple[str, ...]:
    """The ``fit`` arguments of a run that holds ``gpus_per_run`` GPUs (DDP over them when several)."""
    devices = max(1, int(check_share(gpus_per_run)))
    return ("--trainer.accelerator", "gpu", "--trainer.devices", str(devices))


def visible_gpus(environ: dict | None = None) -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES`` when set, else every device CUDA counts."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip() and device.strip() != "-1"]
    import torch  # only when GPUs are asked for

    return [str(index) for index in range(torch.cuda.device_count())]


class GpuSlots:
    """Hands out GPUs to runs: ``runs_per_gpu`` runs per device for a fractional share, the least loaded
    device first; ``n`` free devices for a share of ``n``.

    Args:
        devices: the device ids to hand out (as ``CUDA_VISIBLE_DEVICES`` names them).
        gpus_per_run: each run's share.

    Raises:
        ValueError: no device, or fewer devices than one run needs.
    """

    def __init__(self, devices: list[str], gpus_per_run: float) -> None:
        self.share = check_share(gpus_per_run)
        self.per_gpu = runs_per_gpu(self.share)
        self.width = max(1, int(self.share))
        if len(devices) < self.width:
            found = ", ".join(devices) if devices else "none"
            raise ValueError(f"--gpus-per-run {self.share:g} needs {self.width} GPU(s); this machine has {found}")
        self.load = {device: 0 for device in devices}

    @property
    def capacity(self) -> int:
        """Runs that can hold their GPUs at once."""
        return len(self.load) * self.per_gpu if self.width == 1 else len(self.load) // self.width

    def acquire(self) -> tuple[str, ...] | None:
        """Devices for one more run, or ``None`` while every slot is taken."""
        free = sorted((load, index, device) for index, (device, load) in enumerate(self.load.items())
                      if load < self.per_gpu)
        if len(free) < self.width:
            return None
        devices = tuple(device for _, _, device in free[: self.width])
        for device in devices:
            self.load[device] += 1
        return devices

    def release(self, devices: tuple[str, ...]) -> None:
        for device in devices:
            self.load[device] -= 1

    @staticmethod
    def environment(devices: tuple[str, ...]) -> dict[str, str]:
        """The environment variables that give a run ``devices``."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
