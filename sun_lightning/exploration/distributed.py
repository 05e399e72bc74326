"""One exploration state across the processes of a data-parallel run (Lightning's DDP strategy).

Under DDP every rank steps its own vector envs and trains the same networks (DDP averages the gradients).
Exploration must still be that of one agent: SUN's pseudocounts (SPEC §4) are global counts, or each
rank would explore as if alone. So each vector step, every rank all-gathers the new transitions of all
ranks in rank order (:func:`gather_step`) and writes the same entries, in the same order, into its own
copy of the replay storage D and its pseudocount index. Every rank then holds D of the whole job, with
counts equal to a single-process index fed the gathered transitions; goal selection draws candidates from
this global D, and coverage and entropy cover every rank's data.

The functions here take the collective as an argument (``all_gather``: a tensor ``[...]`` → ``[W, ...]``,
:func:`all_gather` in a run), so the packing is tested without a process group.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import numpy as np
import torch


def gather_step(step: Mapping[str, torch.Tensor], all_gather: Callable[[torch.Tensor], torch.Tensor],
                device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """All ranks' rows of one vector step, rank-major: rank r's row b becomes row ``r·B + b``.

    The step's tensors (each ``[B, ...]``, any dtype, the same keys and shapes on every rank) travel as one
    float64 tensor, so one collective carries a step: float32 observations and integer counts below 2**53
    survive the round trip exactly.

    Args:
        step: one collected vector step of this rank.
        all_gather: the collective, ``[B, width]`` → ``[W, B, width]``.
        device: where the collective runs (NCCL needs the GPU); the step's device by default.

    Returns:
        The gathered step, each tensor ``[W·B, ...]`` with its original dtype, on the step's device.
    """
    names = list(step)  # the same order on every rank: the same code built the step
    first = step[names[0]]
    rows = first.shape[0]
    columns = [step[name].reshape(rows, -1) for name in names]
    widths = [column.shape[1] for column in columns]
    packed = torch.cat([column.to(torch.float64) for column in columns], 1)
    gathered = all_gather(packed.to(device or first.device))
    gathered = gathered.reshape(-1, packed.shape[1]).to(first.device)
    out, start = {}, 0
    for name, width in zip(names, widths):
        value = step[name]
        out[name] = gathered[:, start : start + width].to(value.dtype).reshape(-1, *value.shape[1:])
        start += width
    return out


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` of every rank of the default process group, stacked in rank order ``[W, ...]``.

    ``torch.distributed`` itself: Lightning's ``strategy.all_gather`` goes through the autograd-aware
    collective, which torch deprecates and which no step of collection needs.
    """
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, tensor)
    return torch.stack(parts)


def seed_rank(seed: int, rank: int) -> None:
    """Give rank ``rank`` its own torch, numpy and Python random streams (acting noise, goal draws, batches).

    Lightning seeds every rank alike during DDP set-up; the networks are then equal on every rank (DDP also
    broadcasts rank 0's), and from here on each rank explores and samples with its own stream.
    """
    derived = (seed * 1_000_003 + rank) % 2**31
    torch.manual_seed(derived)
    np.random.seed(derived)
    random.seed(derived)


def mean_over_ranks(metrics: dict[str, float], reduce_mean: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, float]:
    """``metrics`` averaged over the ranks (each rank has the same keys: the same number of updates ran on each)."""
    if not metrics:
        return metrics
    names = sorted(metrics)
    values = reduce_mean(torch.tensor([metrics[name] for name in names], dtype=torch.float64))
    return dict(zip(names, values.tolist()))
