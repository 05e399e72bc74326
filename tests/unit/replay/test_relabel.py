"""Tests for the segmented-future HER of SPEC §5a (paper figure "HER segmented").

The vectorised implementation is checked against a plain Python-loop
reference that reads the same uniforms, plus structural properties.
"""

from __future__ import annotations

import math

import pytest
import torch

from sun_lightning.replay.relabel import (
    sample_segment_goal_index,
    segment_goal_index,
)


def _reference(episode_end, u):
    """Literal per-row walk of SPEC §5a, written with Python ints/floats."""
    ends = episode_end.bool().tolist()
    us = u.tolist()
    out = []
    for row_end, row_u in zip(ends, us):
        T = len(row_end)
        goal = [None] * T
        s = 0
        while s < T:
            e = next((j for j in range(s, T) if row_end[j]), T - 1)
            k = s + math.floor(row_u[s] * (e - s + 1))
            k = min(k, e)
            for t in range(s, k + 1):
                goal[t] = k
            s = k + 1
        out.append(goal)
    return torch.tensor(out, dtype=torch.long).reshape(episode_end.shape)


def _check_properties(episode_end, goal):
    N, T = episode_end.shape
    ends = episode_end.bool().tolist()
    g = goal.tolist()
    for n in range(N):
        prev_cut = -1
        for t in range(T):
            k = g[n][t]
            assert t <= k < T
            # The goal step is itself a cut: it is its own goal.
            assert g[n][k] == k
            # Same episode: no episode end strictly before the goal index.
            assert not any(ends[n][t:k])
            # Contiguity: a step either continues the current segment or
            # starts a new one right after the previous cut.
            if t > 0 and k != g[n][t - 1]:
                assert g[n][t - 1] == t - 1 == prev_cut
            if k == t:
                prev_cut = t
        # The last step always closes a segment.
        assert g[n][T - 1] == T - 1


@pytest.mark.parametrize("T", [1, 2, 3, 5, 8, 16, 17, 33])
@pytest.mark.parametrize("p_end", [0.0, 0.1, 0.4, 1.0])
def test_matches_reference(T, p_end):
    g = torch.Generator().manual_seed(1000 * T + int(100 * p_end))
    N = 48
    episode_end = torch.rand(N, T, generator=g) < p_end
    u = torch.rand(N, T, generator=g)
    got = segment_goal_index(episode_end, u)
    assert got.dtype == torch.long and got.shape == (N, T)
    assert torch.equal(got, _reference(episode_end, u))
    _check_properties(episode_end, got)


def test_matches_reference_extreme_uniforms():
    g = torch.Generator().manual_seed(7)
    N, T = 64, 16
    episode_end = torch.rand(N, T, generator=g) < 0.15
    # Mix exact zeros, values near 1 and the largest float32 below 1.
    choices = torch.tensor([0.0, 0.5, 0.999999, 1.0 - 2.0**-24])
    u = choices[torch.randint(0, 4, (N, T), generator=g)]
    got = segment_goal_index(episode_end, u)
    assert torch.equal(got, _reference(episode_end, u))
    _check_properties(episode_end, got)


def test_u_zero_every_step_own_goal():
    episode_end = torch.rand(5, 16) < 0.3
    got = segment_goal_index(episode_end, torch.zeros(5, 16))
    assert torch.equal(got, torch.arange(16).expand(5, 16))


def test_u_near_one_no_ends_all_last():
    got = segment_goal_index(
        torch.zeros(4, 16, dtype=torch.bool), torch.full((4, 16), 0.999999)
    )
    assert torch.equal(got, torch.full((4, 16), 15))


def test_u_near_one_with_ends_goal_is_episode_end():
    episode_end = torch.zeros(1, 10, dtype=torch.bool)
    episode_end[0, 3] = True
    episode_end[0, 6] = True
    got = segment_goal_index(episode_end, torch.full((1, 10), 0.999999))
    assert got.tolist() == [[3, 3, 3, 3, 6, 6, 6, 9, 9, 9]]


def test_paper_figure_example():
    # Cuts at 2, 4, 6 (paper figure "HER segmented"), T = 7, no episode end.
    T = 7
    u = torch.zeros(1, T)
    u[0, 0] = 2.5 / 7  # floor(0.357 * 7) = 2
    u[0, 3] = 1.5 / 4  # floor(0.375 * 4) = 1 -> k = 4
    u[0, 5] = 0.99  # floor(0.99 * 2) = 1 -> k = 6
    got = segment_goal_index(torch.zeros(1, T, dtype=torch.bool), u)
    assert got.tolist() == [[2, 2, 2, 4, 4, 6, 6]]


def test_episode_end_float_flags_and_u_unused_off_starts():
    episode_end = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    u = torch.tensor([[0.0, 0.9, 0.6, 0.9]])
    # Start 0 -> k=0; start 1 -> e=1, k=1; start 2 -> e=3, floor(.6*2)=1 -> 3.
    assert segment_goal_index(episode_end, u).tolist() == [[0, 1, 3, 3]]


def test_sample_reproducible_and_valid():
    episode_end = torch.rand(64, 16, generator=torch.Generator().manual_seed(0)) < 0.1
    a = sample_segment_goal_index(episode_end, torch.Generator().manual_seed(5))
    b = sample_segment_goal_index(episode_end, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    u = torch.rand(64, 16, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, _reference(episode_end, u))
    _check_properties(episode_end, a)
    c = sample_segment_goal_index(episode_end)
    _check_properties(episode_end, c)


def test_cut_distribution_uniform_over_episode():
    # First cut is uniform over [0, e]: with e = 3 each of 0..3 shows up ~1/4.
    episode_end = torch.zeros(4000, 8, dtype=torch.bool)
    episode_end[:, 3] = True
    goal = sample_segment_goal_index(episode_end, torch.Generator().manual_seed(9))
    freq = torch.bincount(goal[:, 0], minlength=8).double() / 4000
    assert freq[4:].sum() == 0
    assert torch.all((freq[:4] - 0.25).abs() < 0.03)
