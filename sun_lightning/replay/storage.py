"""Replay storage D: a TorchRL tensor storage of B interleaved env streams with pseudocounts.

Entries are written one vector-env step (B frames) at a time, frame (t, b)
at flat position (t·B + b) mod capacity, so the T steps following an entry of
env b are B positions apart. Episode ends are kept as flags, so sequences may
run across episodes and the learner still keeps them apart (SPEC §5a).
Every entry has a pseudocount, maintained on insert (SPEC §4).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyTensorStorage

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace

STORED_KEYS = (keys.OBS, keys.ACTION, keys.NEXT_OBS, keys.TERMINATED, keys.EPISODE_END)


class GoalReplayStorage:
    """Replay storage of transitions with per-entry pseudocounts.

    Args:
        space: the environment's goal space (projection, counts).
        num_envs: B, the number of interleaved env streams.
        capacity: entries kept; the oldest are evicted (FIFO) beyond it.
        pseudocount: an object with ``insert(index, x, action)``, ``counts(index)``
            and ``__len__`` (:class:`~sun_lightning.replay.exact_count.ExactCount`
            or the radius pseudocount).
        device: where the entries live.
    """

    def __init__(self, space: GoalSpace, num_envs: int, capacity: int, pseudocount, device: str | torch.device = "cpu") -> None:
        if capacity < num_envs:
            raise ValueError(f"capacity ({capacity}) must hold at least one step of {num_envs} envs")
        self.space = space
        self.num_envs = num_envs
        self.capacity = capacity - capacity % num_envs
        self.pseudocount = pseudocount
        self.device = torch.device(device)
        self._storage = LazyTensorStorage(self.capacity, device=self.device)
        self.steps = 0  # vector-env steps written so far
        self._positions = torch.arange(num_envs, device=self.device)  # offsets of one step's entries
        # Exact spaces: each entry's tile, kept on insert so the sampler's kernel reads rewards
        # without an argmax over every sampled goal row.
        self.tiles = torch.zeros(self.capacity, dtype=torch.long, device=self.device) if space.reach == "exact" else None

    def __len__(self) -> int:
        return min(self.steps * self.num_envs, self.capacity)

    @property
    def steps_held(self) -> int:
        return len(self) // self.num_envs

    def extend(self, frames: TensorDictBase | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Write one vector step (``frames``: the stored keys, each ``[B, ...]``) and update pseudocounts.

        The step's B positions are consecutive (the capacity is a multiple of B), so after the
        TorchRL storage has allocated its columns on the first write, each key is one slice copy
        into its column: TorchRL's generic ``set`` cost several times more per step. Its own
        length and cursor then go unused; ``steps`` is the count this class relies on.

        Returns:
            The storage positions written, ``[B]``.
        """
        start = self.steps * self.num_envs % self.capacity
        index = self._positions + start
        if self._storage.initialized:
            table = self._storage._storage
            for name in STORED_KEYS:
                table.get(name)[start : start + self.num_envs] = frames[name]
        else:
            first = TensorDict({name: frames[name] for name in STORED_KEYS}, batch_size=[self.num_envs])
            self._storage.set(index, first.to(self.device))
        action = frames[keys.ACTION].to(self.device) if self.space.discrete else None
        goal = self.space.project(frames[keys.OBS].to(self.device))
        if self.tiles is not None:
            self.tiles[start : start + self.num_envs] = self.space.tile(goal)
        self.pseudocount.insert(index, goal, action)
        self.steps += 1
        return index

    def table(self) -> TensorDict | None:
        """The stored columns, ``[capacity]`` (``None`` before the first write); read-only for callers."""
        return self._storage._storage if self._storage.initialized else None

    def get(self, index: torch.Tensor, names: tuple[str, ...] = STORED_KEYS) -> TensorDict:
        """Entries at flat positions ``index`` (any shape), the keys ``names`` only.

        Each key is one row gather of the storage's tensor: TorchRL's generic
        ``get`` (TensorDict indexing) cost several times more per call, and
        every learning batch and goal selection reads the storage.
        """
        if len(self) == 0:
            raise RuntimeError("cannot read from an empty replay storage")
        flat = index.reshape(-1)
        table = self._storage._storage  # the TensorDict [capacity] behind the TorchRL storage
        out = {}
        for name in names:
            column = table.get(name)
            out[name] = column.index_select(0, flat).view(*index.shape, *column.shape[1:])
        return TensorDict(out, batch_size=index.shape)

    def goal_keys(self, index: torch.Tensor) -> torch.Tensor | None:
        """An integer per entry at ``index`` that is equal exactly where the entries' goal projections are
        (their tiles, on exact spaces), or ``None`` where the storage has none (continuous goals)."""
        return None if self.tiles is None else self.tiles[index]

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """Pseudocounts n of the entries at ``index``, O(1)."""
        return self.pseudocount.counts(index.reshape(-1)).reshape(index.shape)

    def scale(self) -> torch.Tensor | None:
        """Goal standardization σ̃ of the radius pseudocount (``None`` for exact counts)."""
        scale = getattr(self.pseudocount, "scale", None)
        return scale() if callable(scale) else None

    def sample_index(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform positions of stored entries."""
        n = len(self)
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay storage")
        return torch.randint(n, shape, generator=generator, device=self.device)

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
