"""Every pseudocount of D's entries satisfies the one protocol (SPEC §4), by its methods and by its counts: the same
inserts give the counts of a brute-force neighbour count over the stored entries, through FIFO eviction."""

from __future__ import annotations

import pytest
import torch

from sun_lightning.replay.binned_count import BinnedCount
from sun_lightning.replay.counts import Pseudocount
from sun_lightning.replay.exact_count import ExactCount
from sun_lightning.replay.pseudocount import RadiusPseudocount
from sun_lightning.replay.pseudocount_index import GridIndex
from sun_lightning.replay.pseudocount_torch import TorchRadiusPseudocount

CAPACITY, B, ACTIONS, LEVELS = 24, 4, 3, 5  # goals: two coordinates of LEVELS values each, and an action
RHO = 0.9  # in σ̃ units: grid neighbours count each other too
FIXED = 10**6  # inserts between σ̃ updates: σ̃ of the first step throughout, so insert-time counts stay current


def make(kind: str) -> Pseudocount:
    if kind == "exact":
        return ExactCount(LEVELS * LEVELS * ACTIONS, CAPACITY, ACTIONS)
    if kind == "binned":
        return BinnedCount((0.0, 0.0), (1.0, 1.0), CAPACITY, ACTIONS, sigma_every=FIXED)
    cls = RadiusPseudocount if kind == "native" else TorchRadiusPseudocount
    return cls(2, RHO, CAPACITY, ACTIONS, sigma_every=FIXED)


def goals(kind: str, level: torch.Tensor) -> torch.Tensor:
    """The goals of grid points ``level`` ``[B, 2]``: one-hot tiles for exact counts, coordinates in [0, 1] else."""
    if kind == "exact":
        return torch.nn.functional.one_hot(level[:, 0] * LEVELS + level[:, 1], LEVELS * LEVELS).float()
    return level / (LEVELS - 1)


def neighbours(kind: str, level: torch.Tensor, action: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """``[N, N]``: whether stored entries i and j count each other, by hand."""
    same_action = action[:, None] == action[None, :]
    if kind in ("exact", "binned"):  # LEVELS values fall in distinct tiles and distinct bins
        return same_action & (level[:, None] == level[None, :]).all(-1)
    x = (level / (LEVELS - 1)).double() / scale.double()
    d2 = ((x[:, None] - x[None, :]) ** 2).sum(-1)
    assert ((d2 - RHO**2).abs() > 1e-6).all()  # no pair on the radius: float32 σ̃ decides as the float64 one
    return same_action & (d2 <= RHO**2)


KINDS = ["exact", "binned", "native", "torch"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_implementation_is_a_pseudocount(kind):
    count = make(kind)
    assert isinstance(count, Pseudocount)
    assert (count.scale() is None) == (kind == "exact")
    assert len(count) == 0


def test_the_native_index_alone_is_not_a_pseudocount():
    # It stores what RadiusPseudocount hands it (numpy arrays, empty positions); standardization and eviction are
    # the pseudocount's.
    assert not isinstance(GridIndex, Pseudocount) and not issubclass(GridIndex, Pseudocount)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_inserts_give_brute_force_counts_through_eviction(kind):
    generator = torch.Generator().manual_seed(0)
    count = make(kind)
    level = torch.zeros(CAPACITY, 2, dtype=torch.long)
    action = torch.zeros(CAPACITY, dtype=torch.long)
    seen = 0
    for _ in range(20):  # 80 entries: D wraps three times
        index = torch.arange(seen, seen + B) % CAPACITY
        level[index] = torch.randint(LEVELS, (B, 2), generator=generator)
        action[index] = torch.randint(ACTIONS, (B,), generator=generator)
        count.insert(index, goals(kind, level[index]), action[index])
        seen += B
        held = torch.arange(min(seen, CAPACITY))
        expected = neighbours(kind, level[held], action[held], count.scale()).sum(1)
        assert len(count) == len(held)
        assert torch.equal(count.counts(held).long().cpu(), expected)
    assert expected.max() > 1 and expected.min() == 1  # shared goals and lonely ones were seen
    if kind in ("native", "torch"):  # ... and, within the radius, neighbours at other goals
        assert not torch.equal(expected, neighbours("exact", level, action, None).sum(1))
