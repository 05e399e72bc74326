"""The replay storage D and the pseudocounts of its entries, kept in step by one owner (SPEC §4, §5d).

Every entry written to D is counted in the same call, under its goal projection (and its action where actions are
part of the goal), so the counts always describe D's entries position by position: selection reads them
(:class:`~sun_lightning.goals.transform.GoalSelectionTransform`), a checkpoint saves both together.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import torch
from tensordict import TensorDictBase

from sun_lightning import keys
from sun_lightning.checkpoints import safe_pickle
from sun_lightning.replay.counts import Pseudocount
from sun_lightning.replay.storage import GoalReplayStorage


class CountedReplay:
    """D (:attr:`storage`) and the counts of its entries (:attr:`pseudocount`), written together.

    Args:
        storage: an empty replay storage.
        pseudocount: its (fresh) counts, of the same capacity.
    """

    def __init__(self, storage: GoalReplayStorage, pseudocount: Pseudocount) -> None:
        self._storage = storage
        self._pseudocount = pseudocount

    @property
    def storage(self) -> GoalReplayStorage:
        return self._storage

    @property
    def pseudocount(self) -> Pseudocount:
        return self._pseudocount

    def __len__(self) -> int:
        return len(self._storage)

    def extend(self, step: TensorDictBase | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Write one vector step (the stored keys, each ``[B, ...]``) into D and count its entries; returns their
        positions ``[B]``."""
        index = self._storage.extend(step)
        self._count(index, step)
        return index

    def _count(self, index: torch.Tensor, entries: TensorDictBase | Mapping[str, torch.Tensor]) -> None:
        space, device = self._storage.space, self._storage.device
        action = entries[keys.ACTION].to(device) if space.discrete else None
        self._pseudocount.insert(index, space.project(entries[keys.OBS]).to(device), action)

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        """n of the entries at positions ``index`` (any shape and device; the result on D's device), O(1) reads."""
        return self._pseudocount.counts(index.reshape(-1).to(self._storage.device)).reshape(index.shape)

    def scale(self) -> torch.Tensor | None:
        """The goal standardization σ̃ on D's device (the relabelling's and the reach rule's radius), ``None`` for
        exact counts."""
        scale = self._pseudocount.scale()
        return None if scale is None else scale.to(self._storage.device)

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``storage``: D's entries; ``pseudocount``: the counts, pickled (the keys of an exploration state)."""
        return {"storage": self._storage.state_dict(), "pseudocount": pickle.dumps(self._pseudocount)}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict` (other keys of ``state`` are ignored) into this fresh replay.

        D of another capacity (a run extended with a larger ``data.capacity``) is counted again instead, which gives
        the counts of the run that collected it only if D never wrapped.
        """
        saved = state["storage"]
        if saved.get("capacity") == self._storage.capacity:
            self._storage.load_state_dict(saved)
            restore_into(self._pseudocount, state["pseudocount"])
            return
        written = saved["steps"] * self._storage.num_envs
        held = 0 if saved["columns"] is None else len(next(iter(saved["columns"].values())))
        if written > held:
            raise ValueError(f"the checkpoint's replay buffer wrapped ({written} entries written, the last {held} "
                             f"kept): resume with the data.capacity it was run with ({saved.get('capacity')})")
        self._storage.load_state_dict(saved)
        self.recount()

    def recount(self) -> None:
        """Count D's entries into the (fresh) pseudocount one vector step at a time, as they were collected.

        Equal to the counts of the run that collected them as long as D never wrapped (the default capacity).
        """
        storage, step = self._storage, self._storage.num_envs
        if storage.steps * step > storage.capacity:
            raise ValueError(f"data.capacity ({storage.capacity}) is smaller than the checkpoint's replay buffer "
                             f"({storage.steps * step} entries): resume with the capacity it was run with")
        for start in range(0, len(storage), step):
            index = torch.arange(start, start + step, device=storage.device)
            self._count(index, storage.get(index))


def restore_into(target: object, blob: bytes) -> None:
    """Replace ``target``'s attributes by those of a pickled object of its class (whoever holds ``target`` keeps
    it)."""
    loaded = safe_pickle.loads(blob)
    if type(loaded) is not type(target):
        raise ValueError(f"checkpoint holds a {type(loaded).__name__}, this run a {type(target).__name__}")
    vars(target).clear()
    vars(target).update(vars(loaded))
