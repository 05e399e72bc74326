"""The segmented-future batches of :class:`~sun_lightning.replay.hindsight.SegmentedHindsightSampler` as one C
pass (``_hindsight.c``, built by :mod:`sun_lightning.native`) on CPU.

The sampler's tensor path is the reference (tests compare both on the same draws) and runs
wherever this does not: a storage on GPU, other dtypes, or no C compiler. On CPU that path costs
~100 small ops per draw, dispatch-bound at a few hundred rows. The random draws stay torch's,
made by the sampler before either path runs, so a seed gives the same batch on both.
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path

import torch
from tensordict import TensorDictBase

from sun_lightning import keys
from sun_lightning.native import NativeLibrary
from sun_lightning.replay.storage import GoalReplayStorage

__all__ = ["applies", "segmented_batch"]

_p, _i64 = ctypes.c_void_p, ctypes.c_int64
LIBRARY = NativeLibrary(
    Path(__file__).with_name("_hindsight.c"),
    {"segmented_batch": ([_i64] * 8 + [_p] * 20, ctypes.c_int)},
    "The segmented hindsight batch kernel (_hindsight.c)",
)

#: The stored columns the kernel reads, with the dtypes it reads them as.
_COLUMNS = {keys.OBS: torch.float32, keys.NEXT_OBS: torch.float32, keys.ACTION: torch.int64,
            keys.TERMINATED: torch.bool, keys.EPISODE_END: torch.bool}


#: applies()'s answer per storage, with the column table it was given for (weak keys: storages come and go).
_APPLIES: weakref.WeakKeyDictionary[GoalReplayStorage, tuple[TensorDictBase, bool]] = weakref.WeakKeyDictionary()


def applies(storage: GoalReplayStorage) -> bool:
    """Whether the kernel serves ``storage``: on CPU, discrete actions with the exact or radius reach
    rule, the stored dtypes it reads (float32 observations, int64 actions, bool flags, one row per
    entry), and the library builds (warns once if not)."""
    table = storage.table()
    cached = _APPLIES.get(storage)  # (table, answer): columns are allocated once, at the first write
    if cached is not None and cached[0] is table:
        return cached[1]
    space = storage.space
    ok = storage.device.type == "cpu" and space.discrete and space.reach in ("exact", "radius") and table is not None
    for name, dtype in _COLUMNS.items() if ok else ():
        column = table.get(name)
        if column.dtype != dtype or column.dim() != (2 if dtype is torch.float32 else 1) or not column.is_contiguous():
            ok = False
    ok = ok and LIBRARY.available("Falling back to the tensor path of SegmentedHindsightSampler.")
    _APPLIES[storage] = (table, ok)
    return ok


@torch.no_grad()
def segmented_batch(
    storage: GoalReplayStorage,
    num_sequences: int,
    length: int,
    relabels: int,
    seq_index: torch.Tensor,
    u: torch.Tensor,
    neg_index: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """The keys of ``k`` stacked batches (see ``SegmentedHindsightSampler.sample``) from the draws.

    Args:
        storage: a storage :func:`applies` accepts.
        num_sequences, length, relabels: s, t and r of the sampler.
        seq_index: ``[k·s, t]`` storage positions of the runs.
        u: ``[k·s·r, t]`` float32 uniforms of the cuts (row (batch, run, relabelling)).
        neg_index: ``[k, s, r]`` storage positions of the negative goals, or ``None`` for none.

    Returns:
        Every key of the batch; REWARD only for the exact reach rule (the caller applies
        ``goal_reached`` to the tables otherwise).
    """
    s, t, r = num_sequences, length, relabels
    k = seq_index.shape[0] // s
    space, table = storage.space, storage.table()
    obs = table.get(keys.OBS)
    obs_dim, goal_dim = obs.shape[1], space.goal_dim
    negatives = neg_index is not None
    c, goal_rows = (2 * r if negatives else r), s * t + (s * r if negatives else 0)
    goal_dims = None if space.goal_dims is None else torch.tensor(space.goal_dims, dtype=torch.int64)
    seq_index, u = seq_index.to(torch.int64).contiguous(), u.to(torch.float32).contiguous()
    neg_index = neg_index.to(torch.int64).contiguous() if negatives else None
    if seq_index.shape != (k * s, t) or u.shape != (k * s * r, t) or (negatives and neg_index.shape != (k, s, r)):
        raise ValueError("draws of mismatching shapes for the sampler's sizes")
    exact = storage.tiles is not None

    rows = (k, s * c, t)
    out = {
        keys.STATES: torch.empty(k, 2 * s * t, obs_dim, dtype=torch.float32),  # the C side writes floats
        keys.GOALS: torch.empty(k, goal_rows, goal_dim, dtype=torch.float32),
        keys.STATE_INDEX: torch.empty(rows, dtype=torch.int64),
        keys.NEXT_STATE_INDEX: torch.empty(rows, dtype=torch.int64),
        keys.GOAL_INDEX: torch.empty(rows, dtype=torch.int64),
        keys.ACTION: torch.empty(rows, dtype=torch.int64),
        keys.GOAL_ACTION: torch.empty(rows, dtype=torch.int64),
        keys.REWARD: torch.empty(rows, dtype=torch.float32) if exact else None,
        keys.TERMINATED: torch.empty(rows, dtype=torch.bool),
        keys.EPISODE_END: torch.empty(rows, dtype=torch.bool),
    }

    def ptr(x: torch.Tensor | None) -> int | None:
        return None if x is None else x.data_ptr()

    status = LIBRARY.load().segmented_batch(
        k, s, t, r, int(negatives), obs_dim, goal_dim, len(obs),
        ptr(goal_dims), obs.data_ptr(), table.get(keys.NEXT_OBS).data_ptr(), table.get(keys.ACTION).data_ptr(),
        table.get(keys.TERMINATED).data_ptr(), table.get(keys.EPISODE_END).data_ptr(), ptr(storage.tiles),
        seq_index.data_ptr(), u.data_ptr(), ptr(neg_index),
        *(ptr(out[name]) for name in (keys.STATES, keys.GOALS, keys.STATE_INDEX, keys.NEXT_STATE_INDEX, keys.GOAL_INDEX,
                                      keys.ACTION, keys.GOAL_ACTION, keys.REWARD, keys.TERMINATED, keys.EPISODE_END)),
    )
    if status == -1:
        raise IndexError(f"a drawn position is outside the storage's [0, {len(obs)})")
    if status:
        raise ValueError(f"sizes the kernel does not handle: length {t}, goal dim {goal_dim} of obs dim {obs_dim}")
    return out
