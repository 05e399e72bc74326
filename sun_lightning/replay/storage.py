"""Replay storage D: a TensorDict of columns holding B interleaved env streams (SPEC §1, §5d).

Entries are written one vector-env step (B frames) at a time, frame (t, b)
at flat position (t·B + b) mod capacity, so the T steps following an entry of
env b are B positions apart. Episode ends are kept as flags, so sequences may
run across episodes and the learner still keeps them apart (SPEC §5a). The
pseudocounts of the entries are kept beside D, by position, and written with it
(:class:`~sun_lightning.replay.counted.CountedReplay`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import TensorStorage

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace

STORED_KEYS = (keys.OBS, keys.ACTION, keys.NEXT_OBS, keys.TERMINATED, keys.EPISODE_END)


class GoalReplayStorage:
    """Replay storage of transitions, laid out for runs of consecutive steps.

    The columns are one TensorDict ``[capacity]`` allocated at the first write
    (shapes and dtypes from it), also exposed as a TorchRL
    :class:`~torchrl.data.TensorStorage` (:attr:`torchrl_storage`) for TorchRL's
    replay-buffer tools.

    Args:
        space: the environment's goal space (projection, exact tiles).
        num_envs: B, the number of interleaved env streams.
        capacity: entries kept; the oldest are evicted (FIFO) beyond it.
        device: where the entries live (the training device, or the CPU).
    """

    def __init__(self, space: GoalSpace, num_envs: int, capacity: int, device: str | torch.device = "cpu") -> None:
        if capacity < num_envs:
            raise ValueError(f"capacity ({capacity}) must hold at least one step of {num_envs} envs")
        self.space = space
        self.num_envs = num_envs
        self.capacity = capacity - capacity % num_envs
        self.device = torch.device(device)
        self.columns: TensorDict | None = None
        self.torchrl_storage: TensorStorage | None = None
        self.steps = 0  # vector-env steps written so far
        self._positions = torch.arange(num_envs, device=self.device)  # offsets of one step's entries
        # Exact spaces: each entry's tile, kept on insert so that selection can evaluate each distinct
        # goal once (goal_keys) and rewards compare integers.
        self.tiles = torch.zeros(self.capacity, dtype=torch.long, device=self.device) if space.reach == "exact" else None

    def __len__(self) -> int:
        return min(self.steps * self.num_envs, self.capacity)

    @property
    def steps_held(self) -> int:
        return len(self) // self.num_envs

    def extend(self, frames: TensorDictBase | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Write one vector step (``frames``: the stored keys, each ``[B, ...]``).

        The step's B positions are consecutive (the capacity is a multiple of B), so each
        column takes one slice copy.

        Returns:
            The storage positions written, ``[B]`` (where the pseudocounts of these entries go).
        """
        start = self.steps * self.num_envs % self.capacity
        if self.columns is None:
            self._allocate(frames)
        for name in STORED_KEYS:
            self.columns.get(name)[start : start + self.num_envs] = frames[name]
        if self.tiles is not None:
            self.tiles[start : start + self.num_envs] = self.space.tile(frames[keys.OBS])
        self.steps += 1
        return self._positions + start

    def _allocate(self, frames: TensorDictBase | Mapping[str, torch.Tensor]) -> None:
        columns = {}
        for name in STORED_KEYS:
            value = torch.as_tensor(frames[name])
            if value.shape[0] != self.num_envs:
                raise ValueError(f"a vector step must hold {self.num_envs} frames, got {name} of shape {tuple(value.shape)}")
            columns[name] = torch.zeros((self.capacity, *value.shape[1:]), dtype=value.dtype, device=self.device)
        self.columns = TensorDict(columns, batch_size=[self.capacity], device=self.device)
        self.torchrl_storage = TensorStorage(self.columns, max_size=self.capacity, device=self.device)

    def state_dict(self) -> dict:
        """The stored entries (only the written part) and the step counter, for a checkpoint."""
        held = len(self)
        return {"steps": self.steps, "capacity": self.capacity,
                "columns": None if self.columns is None else {name: self.columns.get(name)[:held].clone()
                                                              for name in STORED_KEYS},
                "tiles": None if self.tiles is None else self.tiles[:held].clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s entries into an empty storage of the same shape."""
        self.steps = 0
        if state["columns"] is not None:
            held = len(next(iter(state["columns"].values())))
            if held > self.capacity:
                raise ValueError(f"the checkpoint holds {held} entries, more than this storage's capacity {self.capacity}")
            self._allocate({name: column[: self.num_envs] for name, column in state["columns"].items()})
            for name, column in state["columns"].items():
                self.columns.get(name)[:held] = column.to(self.device)
            if self.tiles is not None:
                self.tiles[:held] = state["tiles"].to(self.device)
        self.steps = state["steps"]

    def get(self, index: torch.Tensor, names: tuple[str, ...] = STORED_KEYS) -> TensorDict:
        """Entries at flat positions ``index`` (any shape), the keys ``names`` only (one row gather per key)."""
        if len(self) == 0:
            raise RuntimeError("cannot read from an empty replay storage")
        flat = index.reshape(-1)
        out = {}
        for name in names:
            column = self.columns.get(name)
            out[name] = column.index_select(0, flat).view(*index.shape, *column.shape[1:])
        return TensorDict(out, batch_size=index.shape, device=self.device)

    def goal_keys(self, index: torch.Tensor) -> torch.Tensor | None:
        """An integer per entry at ``index`` that is equal exactly where the entries' goal projections are
        (their tiles, on exact spaces), or ``None`` where the storage has none (continuous goals)."""
        return None if self.tiles is None else self.tiles[index]

    def sample_index(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform positions of stored entries."""
        n = len(self)
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay storage")
        return torch.randint(n, shape, generator=generator, device=self.device)

    def following(self, index: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The positions of the ``length`` steps of each entry's env stream that start at it, ``[..., length]``,
        and whether each is stored (not past the newest step; never older than the entry, so never evicted)."""
        held, b = self.capacity // self.num_envs, self.num_envs
        ring, env = torch.div(index, b, rounding_mode="floor"), index % b
        newest = self.steps - 1
        step = newest - (newest - ring) % held  # the absolute step of each entry
        offset = torch.arange(length, device=index.device)
        steps = step.unsqueeze(-1) + offset
        return (steps * b + env.unsqueeze(-1)) % self.capacity, steps <= newest

    def sequence_index(self, num: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Positions ``[num, length]`` of ``num`` runs of ``length`` consecutive steps of one env each."""
        held = self.steps_held
        if held < length:
            raise RuntimeError(f"storage holds {held} steps per env, fewer than a sequence of {length}")
        oldest = self.steps - held
        start = oldest + torch.randint(held - length + 1, (num, 1), generator=generator, device=self.device)
        env = torch.randint(self.num_envs, (num, 1), generator=generator, device=self.device)
        steps = start + torch.arange(length, device=self.device)
        return (steps * self.num_envs + env) % self.capacity
