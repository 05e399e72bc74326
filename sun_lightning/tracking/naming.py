"""What a run is called and tagged: ``<env>-<method>-seed<k>`` (e.g. ``FourRoomStuck-sun-seed0``), the key
the comparison runner finds a run by and the name of its checkpoint folder (derived here only), and the tags
``env``, ``env_id``, ``method``, ``seed``, ``git_commit`` and ``hardware``."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import subprocess
from pathlib import Path

from sun_lightning.methods import DISCOVER_TD3, METHODS, TD3_VARIANT

#: The selection rule of ``data.selector``'s default (SUN adaptive), named ``sun``.
_DEFAULT_SELECTOR = "SUNAdaptive"


def env_name(env_id: str) -> str:
    """The short name of a registered id: ``sun_lightning/FourRoomStuck-v0`` → ``FourRoomStuck``."""
    return env_id.rsplit("/", 1)[-1].rsplit("-v", 1)[0]


def method_of(selector_class_path: str) -> str:
    """The method name (a key of :data:`~sun_lightning.methods.METHODS`) of a selection rule's class path.

    Matched on the class name, so ``sun_lightning.goals.SUNEpisodic`` and
    ``sun_lightning.goals.variants.SUNEpisodic`` agree; a rule the methods table does not name
    (a user's own) is named by its class, lower-cased.
    """
    by_class = {args[args.index("--data.selector") + 1].rsplit(".", 1)[-1]: name
                for name, args in METHODS.items() if "--data.selector" in args}
    by_class.setdefault(_DEFAULT_SELECTOR, "sun")
    by_class.setdefault(DISCOVER_TD3.rsplit(".", 1)[-1], "discover")  # the TD3 variant's DISCOVER (method_args)
    for name, path in TD3_VARIANT.items():  # the TD3 variant's MEGA (method_args)
        by_class.setdefault(path.rsplit(".", 1)[-1], name)
    cls = selector_class_path.rsplit(".", 1)[-1]
    return by_class.get(cls, cls.lower())


def run_name(env_id: str, method: str, seed: int | None) -> str:
    """``<env>-<method>-seed<k>``: the name of a ``fit`` run, the key the comparison runner finds it by."""
    return f"{env_name(env_id)}-{method}-seed{seed}"


def name_of_run(env_id: str, selector: str, seed: int | None) -> str:
    """The run name of a config, from its env id, its selection rule's class (path or name) and its seed: the one
    derivation the CLI (MLflow run, checkpoint folder) and the checkpoint callback share."""
    return run_name(env_id, method_of(selector), seed)


def run_tags(env_id: str, method: str, seed: int | None, accelerator: str = "auto") -> dict[str, str]:
    """The tags of a ``fit`` run: ``env`` (short name), ``env_id``, ``method``, ``seed``, ``git_commit``,
    ``hardware`` (:func:`hardware` for the trainer's ``accelerator``)."""
    return {"env": env_name(env_id), "env_id": env_id, "method": method, "seed": str(seed), "git_commit": git_commit(),
            "hardware": hardware(accelerator)}


def hardware(accelerator: str = "auto") -> str:
    """Where a run computes: ``cuda (<GPU name>)`` or ``cpu (<CPU model>, <n> cores)``.

    The comparison report names it beside each method: runs of one config on different hardware (or
    different matrix-product kernels) agree statistically, not bit for bit.
    """
    import torch

    if str(accelerator).lower() in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name()})"
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    return f"cpu ({model}, {os.cpu_count()} cores)"


@functools.cache
def git_commit() -> str:
    """The commit checked out in this package's repository, or ``unknown`` outside one (an installed wheel).

    Read with ``git rev-parse`` (read-only); MLflow's own ``mlflow.source.git.commit`` tag depends on
    GitPython and on the entry point's path, so the run carries its commit explicitly too.
    """
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
