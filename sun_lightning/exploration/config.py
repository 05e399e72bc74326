"""The ``data`` config of an exploration run (SPEC §9): one frozen value, defined here and passed whole.

The command line's ``data`` keys are this class's fields (LightningCLI follows
:class:`~sun_lightning.exploration.datamodule.ExplorationDataModule`'s ``**config`` into it, so ``--help`` shows
their docs and defaults), :func:`~sun_lightning.exploration.build.build` takes it whole, and the
:class:`~sun_lightning.exploration.handle.Exploration` handle carries it. Its checks are the ones that need nothing
built; what touches registries (``data.goal``, ``data.layout``, the id's goal space) is the DataModule's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jsonargparse import lazy_instance

from sun_lightning.domains import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, check_arguments
from sun_lightning.envconfig.goal import GoalConfig
from sun_lightning.errors import ConfigError
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.sun import SUNAdaptive
from sun_lightning.replay.pseudocount import BACKENDS

#: The values of ``data.counts``.
COUNTS = ("pseudo", "binned")


@dataclass(frozen=True)
class DataConfig:
    """Environments, collector and replay storage of one exploration run.

    Args:
        env_id: a registered id, e.g. ``sun_lightning/FourRoomStuck-v0``; with ``layout``, the id its gridworld
            gets (``sun_lightning/<Name>-v0``, not a built-in's).
        total_frames: env frames of the run (all envs of all processes together), warm-up included.
        num_envs: envs stepped together in one in-process vector env (per process under DDP).
        warmup_frames: frames of uniformly random actions before learning (SPEC §5d).
        capacity: replay entries kept (FIFO eviction beyond); ``None`` keeps everything.
        selector: the goal-selection rule (SPEC §3).
        updates_per_frame: learner updates per env frame (1 in the paper).
        sigma_every: inserts between re-standardizations of the radius pseudocount (SPEC §4).
        backend: the radius pseudocount's index: ``native`` (a C hash grid, built with the system
            C compiler), ``torch`` (brute force on the storage's device), or ``auto`` (native on
            CPU where it builds, torch otherwise, with a one-line warning).
        storage_device: where D and its pseudocounts live; ``None``: the learner's device.
        seed: environment seed; ``None`` derives it from ``seed_everything``.
        counts: what a goal's novelty counts: ``pseudo`` (the radius pseudocount of SPEC §4; exact (tile, action)
            counts on gridworlds) or ``binned`` (the paper's "true counts" ablation: exact counts of 50 bins per goal
            dimension over the metric bounds, per (bin, action) where actions are part of the goal,
            :class:`~sun_lightning.replay.binned_count.BinnedCount`; gridworlds keep their exact counts).
        rho: the pseudocount radius ρ, overriding the environment's (SPEC §4; the paper's ρ ablation); the reach
            rule keeps the environment's. ``None``: the environment's.
        layout: a gridworld's map in SPEC §6's symbols (``W`` wall, ``.`` free, ``Q`` random move, ``S`` start,
            ``G`` terminal, one line per row, tiles separated by spaces), checked and registered under ``env_id``
            (:func:`~sun_lightning.envconfig.layout.parse_layout`: 4 actions, horizon 200, ``G`` ends an episode
            on entry); ``None``: ``env_id`` is an environment of the package.
        goal: the goal space of ``env_id`` as any id :func:`gymnasium.make` knows (
            :class:`~sun_lightning.envs.custom.GoalConfig`, docs/custom-envs.md); ``None``: a registered id.
        env_package: a module imported first (your package's ``gymnasium.register`` calls).
        vector: with ``goal``, gymnasium's ``sync`` (in-process) or ``async`` (a process per env) vector env.
    """

    env_id: str
    total_frames: PositiveInt = 100_000
    num_envs: PositiveInt = 4
    warmup_frames: NonNegativeInt = 10_000
    capacity: PositiveInt | None = None
    selector: GoalSelector = lazy_instance(SUNAdaptive)
    updates_per_frame: NonNegativeFloat = 1.0
    sigma_every: PositiveInt = 1000
    backend: Literal["auto", "native", "torch"] = "auto"
    storage_device: str | None = None
    seed: int | None = None
    layout: str | None = None
    counts: Literal["pseudo", "binned"] = "pseudo"
    rho: PositiveFloat | None = None
    goal: GoalConfig | None = None
    env_package: str | None = None
    vector: Literal["sync", "async"] = "sync"

    def __post_init__(self) -> None:
        check_arguments(DataConfig, vars(self), "data.")  # the annotated domains
        if self.counts not in COUNTS:
            raise ConfigError(f"data.counts must be one of {', '.join(COUNTS)}, got {self.counts!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"data.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.learns and self.total_frames <= self.warmup_frames:
            raise ConfigError(f"data.total_frames ({self.total_frames}) must exceed data.warmup_frames "
                              f"({self.warmup_frames}): learning starts after the warm-up, so this run would learn "
                              "nothing (raise total_frames or lower warmup_frames)")

    @property
    def learns(self) -> bool:
        """Whether the run updates the learner: a rule that learns, at a positive rate."""
        return self.selector.learns and self.updates_per_frame > 0
