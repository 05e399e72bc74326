"""Runs packed onto the CPU cores: each of the local launcher's concurrent runs gets its own share of the cores.

A run's MuJoCo envs step on as many threads as the run may use CPUs (:func:`~sun_lightning.envs.mujoco_vec.available_cpus`),
so without shares N runs at once would each start a thread per core: N times too many. With ``jobs`` runs at
once on ``C`` cores, each run is pinned (its affinity mask) to ``C // jobs`` cores of its own, and its
threads follow. With more runs than cores they are not pinned.
"""

from __future__ import annotations

import os


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks on this OS
        return list(range(os.cpu_count() or 1))


class CoreSlots:
    """``jobs`` disjoint, equal sets of ``cpus``, handed out one per running run.

    Args:
        cpus: the CPU ids to share out.
        jobs: runs at once.
    """

    def __init__(self, cpus: list[int], jobs: int) -> None:
        width = len(cpus) // jobs if jobs <= len(cpus) else 0
        self.sets = [tuple(cpus[i * width:(i + 1) * width]) for i in range(jobs)] if width else []
        self.free = list(range(len(self.sets)))

    def acquire(self) -> tuple[int, ...]:
        """A free set of cores (empty when runs are not pinned)."""
        return self.sets[self.free.pop(0)] if self.sets else ()

    def release(self, cpus: tuple[int, ...]) -> None:
        if cpus:
            self.free.append(self.sets.index(cpus))
            self.free.sort()


def describe(cpus: tuple[int, ...]) -> str:
    """``"CPUs 4-7"`` (or ``"CPUs 0,2"``) for a log line."""
    if len(cpus) > 1 and list(cpus) == list(range(cpus[0], cpus[-1] + 1)):
        return f"CPUs {cpus[0]}-{cpus[-1]}"
    return "CPU" + ("s " if len(cpus) > 1 else " ") + ",".join(map(str, cpus))
