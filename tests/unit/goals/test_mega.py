"""MEGA (goals/mega.py, goals/density.py): the kernel density against scipy and a hand computation, the cutoff
filter, the least-dense choice, both cutoff schedules on scripted successes, and the rule inside the selection
transform on a gridworld (mrl's, per env) and a point maze (DISCOVER's, one pool)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import gaussian_kde

from sun_lightning.goals.density import goal_log_density, kde_log_density
from sun_lightning.goals.mega import MEGA, MEGACount, MEGACountTD3, MEGATD3, mega_scores
from sun_lightning.goals.transform import GoalSelectionTransform
from test_discover_td3 import GAMMA, Ones, PointLearner, point_replay

DATA = torch.tensor([[0.0, 0.0], [1.0, 0.5], [2.0, -1.0], [0.5, 2.0], [-1.0, 1.0]], dtype=torch.float64)
POINTS = torch.tensor([[0.0, 0.0], [3.0, 3.0], [0.5, 0.5]], dtype=torch.float64)


def test_scott_kde_matches_scipy():
    ours = kde_log_density(DATA, POINTS)
    scipy = torch.tensor(gaussian_kde(DATA.T.numpy()).logpdf(POINTS.T.numpy()), dtype=torch.float64)
    # Within the diagonal jitter that keeps a degenerate sample's covariance positive-definite.
    assert torch.allclose(ours, scipy, atol=1e-5)


def test_fixed_bandwidth_kde_against_a_hand_computation():
    data = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    h = 0.5
    # log((N(x; 0, h²I) + N(x; (1,0), h²I)) / 2) at x = (0, 0): the two kernels at distances 0 and 1.
    hand = math.log((1 + math.exp(-1 / (2 * h * h))) / 2 / (2 * math.pi * h * h))
    assert kde_log_density(data, torch.zeros(1, 2), bandwidth=h).item() == pytest.approx(hand, rel=1e-12)


def test_goal_density_standardizes_by_the_sample():
    sample = DATA * torch.tensor([100.0, 3.0]) + 7  # the same cloud, rescaled and shifted per dimension
    goals = POINTS * torch.tensor([100.0, 3.0]) + 7
    assert torch.allclose(goal_log_density(sample, goals, 0.3), goal_log_density(DATA, POINTS, 0.3), rtol=1e-3)
    assert goal_log_density(sample, goals.reshape(3, 1, 2)).shape == (3, 1)


def test_the_cutoff_removes_exactly_the_candidates_below_it_and_the_least_dense_survivor_wins():
    novelty = torch.tensor([[-1.0, -5.0, -3.0, -9.0, -2.0]])
    q = torch.tensor([[4.0, 1.0, 6.0, 0.5, 9.0]])
    viable = q > 2.0
    scores = mega_scores(novelty, q, viable)
    assert scores.argmax().item() == 2  # viable: 0, 2, 4; the least dense of them is 2 (log density −3)
    order = scores[0].argsort(descending=True).tolist()
    assert order[:3] == [2, 4, 0] and order[3:] == [1, 3]  # then the removed ones, the most reachable first


def test_without_a_viable_candidate_the_most_reachable_is_taken():
    scores = mega_scores(torch.tensor([[-1.0, -8.0, -3.0]]), torch.tensor([[0.2, 0.1, 0.7]]), torch.zeros(1, 3, dtype=torch.bool))
    assert scores.argmax().item() == 2


class Learner(PointLearner):
    """One critic (MEGA needs no ensemble) with V(g) = fn(g)."""

    def __init__(self, fn) -> None:
        super().__init__(lambda e, goal: fn(goal), members=1)


def test_discover_cutoff_schedule_on_scripted_batches():
    rule = MEGATD3()
    rule.bind(Learner(None), num_envs=2, horizon=100)
    v = torch.full((2,), 0.1 * (1 - GAMMA))  # Q = V / (1 − γ) = 0.1 on DISCOVER's scale
    assert rule.cutoff_step == 1.0  # the official command line's --mega_cutoff_step_size
    for reached, expected in [([0, 0], 1.0), ([0, 1], 1.0), ([1, 1], 0.0), ([1, 1], 0.0)]:
        rule.episodes_ended(torch.tensor(reached, dtype=torch.bool), v)
        assert rule.cutoff == expected  # < 0.3 rises by 1; in the band stays; > 0.7 falls while ≥ 0 and above Q·reached
    for _ in range(100):  # never above 0.8 · horizon
        rule.episodes_ended(torch.zeros(2, dtype=torch.bool), v)
    assert rule.cutoff == 80.0


def test_mrl_cutoff_schedule_on_scripted_episodes():
    rule = MEGA(success_window=4)
    rule.bind(Learner(None), num_envs=1, horizon=50)
    floor = -(1 - 0.99**40) / (1 - 0.99)
    assert rule.floor == pytest.approx(floor) and rule.cutoff == -3.0
    q_values = torch.full((1, 3), 0.0)  # V = 0: Q = −1 / (1 − γ) = −100, below the floor
    rule.episodes_ended(torch.ones(4, dtype=torch.bool))
    rule.score(q_values, torch.zeros(1, 3))
    assert rule.cutoff == -4.0 and len(rule.successes) == 0  # success 1 ≥ 0.7: down by 1, the window cleared
    rule.episodes_ended(torch.zeros(4, dtype=torch.bool))
    rule.score(q_values, torch.zeros(1, 3))
    assert rule.cutoff == -3.0  # success 0 ≤ 0.3: up by 1, never above the initial cutoff
    rule.episodes_ended(torch.zeros(4, dtype=torch.bool))
    rule.score(q_values, torch.zeros(1, 3))
    assert rule.cutoff == -3.0


def test_a_rule_state_survives_a_checkpoint():
    for cls in (MEGA, MEGATD3):
        rule = cls()
        rule.bind(Learner(None), 2, 100)
        rule.cutoff = 15.0
        rule.episodes_ended(torch.tensor([True]), torch.tensor([0.5]))
        again = cls()
        again.bind(Learner(None), 2, 100)
        again.load_state_dict(rule.state_dict())
        assert again.state_dict() == rule.state_dict()


class TwelveThenThree(Ones):
    """The first 12 entries counted 12 times, the others 3 times."""

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        return torch.where(index < 12, 12.0, 3.0)


def _transform(rule, points, fn, num_envs, counts=None):
    transform = GoalSelectionTransform(rule, point_replay(points, num_envs, counts), Learner(fn), num_envs, horizon=100)
    transform.active = True
    return transform


@pytest.mark.parametrize("num_envs", [1, 3])
def test_discover_mega_picks_the_least_dense_reachable_goals_of_one_pool(num_envs, monkeypatch):
    # A dense cluster near the origin, a sparse ring at radius 3 and one far goal at (9, 9) nobody can reach.
    cluster = [(0.1 * (i % 4), 0.1 * (i // 4)) for i in range(16)]
    ring = [(3 * math.cos(a), 3 * math.sin(a)) for a in (0.0, 1.7, 3.4, 5.1)]
    points = cluster * 2 + ring + [(9.0, 9.0)] * 3
    reachable = lambda goal: torch.where(goal.norm(dim=-1) < 5, 0.9, 0.0)  # V; Q = 90 or 0
    rule = MEGATD3(num_candidates=4096, kde_samples=4096)
    transform = _transform(rule, points[:-(len(points) % num_envs) or None], reachable, num_envs)
    rule.cutoff = 10.0
    transform._select(torch.zeros(num_envs, 2), torch.ones(num_envs, dtype=torch.bool))
    goals = transform.goal
    assert len({tuple(g.tolist()) for g in goals}) == num_envs  # distinct
    assert all(2.9 < g.norm() < 3.1 for g in goals)  # ring goals: rarer than the cluster, reachable unlike (9, 9)


def test_mrl_mega_and_the_pseudocount_variant_inside_the_transform():
    points = [(0.0, 0.0)] * 12 + [(1.0, 1.0)] * 3 + [(4.0, 4.0)]
    reachable = lambda goal: torch.where(goal.norm(dim=-1) < 3, 0.99, 0.0)
    torch.manual_seed(0)
    rule = MEGA(num_candidates=64, kde_samples=256, initial_cutoff=-3.0)
    transform = _transform(rule, points, reachable, 1)
    transform._select(torch.zeros(1, 2), torch.ones(1, dtype=torch.bool))
    assert transform.goal[0].tolist() == [1.0, 1.0]  # the rare reachable cell; (4, 4) is below the cutoff
    counted = MEGACount(num_candidates=64)
    transform = _transform(counted, points, reachable, 1, TwelveThenThree())
    transform._select(torch.zeros(1, 2), torch.ones(1, dtype=torch.bool))
    assert transform.goal[0].tolist() == [1.0, 1.0]
    assert MEGACountTD3.novelty_from == "count" and rule.metrics()["explore/goals/viable"] < 1
