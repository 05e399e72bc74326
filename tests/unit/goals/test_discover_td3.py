"""DISCOVER as its official TD3 code selects (SPEC §3), the reach test on s_{t+1} for continuous goals
(Algorithm 1), and the held-goal signals of a logging window, each against a hand computation."""

from __future__ import annotations

import math

import gymnasium
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict
from torchrl.envs import GymWrapper, TransformedEnv
from torchrl.envs.utils import step_mdp

import sun_lightning.envs  # noqa: F401
from sun_lightning import keys
from sun_lightning.exploration.stats import NEXT_RESELECTED, NEXT_SELECTED, CollectionStats
from sun_lightning.envs.registry import goal_space
from sun_lightning.goals import SUNAdaptive
from sun_lightning.goals.discover import DISCOVERTD3, distance_scale
from sun_lightning.goals.transform import GoalSelectionTransform
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.counts import Pseudocount
from sun_lightning.replay.storage import GoalReplayStorage

POINT_MAZE_S = "sun_lightning/PointMazeS-v0"
GAMMA = 0.99


class Ones:
    """Pseudocount stand-in: every entry counted once, no standardization."""

    def __init__(self) -> None:
        self.held: set[int] = set()

    def insert(self, index: torch.Tensor, x: torch.Tensor, action: torch.Tensor | None = None) -> None:
        self.held.update(index.tolist())

    def counts(self, index: torch.Tensor) -> torch.Tensor:
        return torch.ones(index.shape)

    def scale(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self.held)


class PointLearner:
    """Stand-in learner of E members with V_e(s, g) = fn(e, g), whatever the state; records the actor asked for."""

    device = torch.device("cpu")

    def __init__(self, fn, members: int = 3) -> None:
        self.fn, self.members, self.actors = fn, members, []
        self.hparams = type("HP", (), {"gamma": GAMMA})()
        self.goal_space = goal_space(POINT_MAZE_S)

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None, actor="online"):
        self.actors.append(actor)
        values = torch.stack([self.fn(e, goal) for e in range(self.members)])  # [E, B, K]
        return (values if self.members > 1 else values[0]), None


def point_replay(points: list[tuple[float, float]], num_envs: int, counts: Pseudocount | None = None) -> CountedReplay:
    """A PointMaze-S replay holding ``points``, counted by ``counts`` (:class:`Ones` by default)."""
    storage = GoalReplayStorage(goal_space(POINT_MAZE_S), num_envs, 64)
    replay = CountedReplay(storage, Ones() if counts is None else counts)
    for start in range(0, len(points), num_envs):
        obs = torch.tensor(points[start:start + num_envs], dtype=torch.float32)
        replay.extend(TensorDict({keys.OBS: obs, keys.ACTION: torch.zeros(num_envs, 2), keys.NEXT_OBS: obs,
                                   keys.TERMINATED: torch.zeros(num_envs, dtype=torch.bool),
                                   keys.EPISODE_END: torch.zeros(num_envs, dtype=torch.bool)}, batch_size=[num_envs]))
    return replay


def point_env(selector, replay, learner, num_envs: int, seed: int = 0):
    vec = gymnasium.make_vec(POINT_MAZE_S, num_envs=num_envs, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    base = GymWrapper(vec)
    base.set_seed(seed)
    transform = GoalSelectionTransform(selector, replay, learner, num_envs)
    transform.active = True
    return TransformedEnv(base, transform), transform


# ---- the official score ----------------------------------------------------------------------


def official_transform(v: float) -> float:
    """td3_train.py lines 728–730 on the official scale Q = V / (1 − γ), one number at a time."""
    q = max(v / (1 - GAMMA) + 0.01, 0.001)
    return -math.log((1 - GAMMA) * q) / math.log(GAMMA)


def test_distance_scale_is_minus_the_steps_to_the_goal():
    for d in (0, 1, 7, 40):
        assert distance_scale(torch.tensor(GAMMA**d, dtype=torch.float64), GAMMA).item() == pytest.approx(
            -math.log(GAMMA**d + 0.01 * (1 - GAMMA)) / math.log(GAMMA))
    values = torch.tensor([0.0, 1e-6, 0.3, 0.99, 1.0, 1.2])
    expected = torch.tensor([official_transform(v) for v in values.tolist()])
    torch.testing.assert_close(distance_scale(values, GAMMA), expected)
    assert distance_scale(torch.tensor(0.0), GAMMA).item() == pytest.approx(math.log(1e-4) / math.log(GAMMA) * -1)


def hand_scores(table: list[list[float]], mean_weight: float) -> list[float]:
    """w·μ + σ (population) of the transformed values, candidate by candidate."""
    out = []
    for k in range(len(table[0])):
        d = [official_transform(member[k]) for member in table]
        mu = sum(d) / len(d)
        sigma = math.sqrt(sum((x - mu) ** 2 for x in d) / len(d))
        out.append(mean_weight * mu + sigma)
    return out


def test_score_on_a_fixed_ensemble_against_a_hand_computation():
    table = [[0.9, 0.5, 0.05, 0.0], [0.8, 0.1, 0.30, 0.0], [0.95, 0.4, 0.01, 0.2]]  # [E, K]
    selector = DISCOVERTD3()
    selector.bind(PointLearner(None), num_envs=2)
    for w in (0.0, 0.35, 1.0):
        selector.mean_weight = w
        scores = selector.score(torch.tensor(table, dtype=torch.float64).unsqueeze(1), None)[0]
        assert scores.tolist() == pytest.approx(hand_scores(table, w))


@pytest.mark.parametrize("num_envs", [1, 2, 3])
def test_envs_share_one_pool_and_take_its_best_distinct_goals(num_envs, monkeypatch):
    points = [(0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0), (5.0, 0.0)]
    replay = point_replay(points, num_envs=1)
    # The pool draws entries twice: the goals taken are distinct entries all the same.
    pool = torch.tensor([0, 1, 2, 3, 4, 5, 2, 2, 4, 1])
    drawn = []

    def sample_index(shape, generator=None):
        drawn.append(shape)
        return pool

    monkeypatch.setattr(replay.storage, "sample_index", sample_index)
    table = [[0.9, 0.5, 0.05, 0.0, 0.6, 0.3], [0.8, 0.1, 0.30, 0.0, 0.2, 0.3], [0.95, 0.4, 0.01, 0.2, 0.3, 0.3]]
    by_x = torch.tensor(table)  # member e's value of the goal at x = k

    learner = PointLearner(lambda e, goal: by_x[e][goal[..., 0].round().long()])
    selector = DISCOVERTD3(num_candidates=10)
    env, transform = point_env(selector, replay, learner, num_envs)
    td = env.reset()
    assert drawn == [(10,)]  # one pool for all envs of the round
    assert set(learner.actors) == {"target"}  # values through the target actor
    ranked = sorted(range(6), key=lambda k: -hand_scores(table, 0.0)[k])
    assert td[keys.GOAL][:, 0].round().long().tolist() == ranked[:num_envs]
    assert transform.goal_index.tolist() == ranked[:num_envs]
    assert td[keys.GOAL_SELECTED].all()
    chosen = torch.tensor([sum(table[e][k] for e in range(3)) / 3 for k in ranked[:num_envs]])
    torch.testing.assert_close(transform.value_at_selection, chosen)


def test_mean_weight_follows_the_official_simple_adaptation():
    selector = DISCOVERTD3()
    selector.bind(PointLearner(None), num_envs=2)
    step = 0.5 / 100  # (w_μ,0 + w_σ) / 2 / adaptation_rate
    script = [([False, False], step), ([True, False], step), ([True, True], 0.0), ([True, True], 0.0),
              ([False, False], step), ([False, True], step), ([True, True], 0.0)]
    for reached, expected in script:
        selector.episodes_ended(torch.tensor(reached))
        assert selector.mean_weight == pytest.approx(expected)
    # Episodes that end apart count as one batch once B of them have ended.
    selector.episodes_ended(torch.tensor([False]))
    assert selector.mean_weight == 0.0 and selector.episodes == 1
    selector.episodes_ended(torch.tensor([False]))
    assert selector.mean_weight == pytest.approx(step) and selector.episodes == 0
    for _ in range(500):  # bounded above by 2 · (w_μ,0 + w_σ) / 2
        selector.episodes_ended(torch.tensor([False, False]))
    assert selector.mean_weight == pytest.approx(1.0)
    state = selector.state_dict()
    other = DISCOVERTD3()
    other.load_state_dict(state)
    assert other.state_dict() == state
    assert selector.metrics() == {"explore/goals/mean_weight": pytest.approx(1.0)}


def test_episode_outcomes_reach_the_rule_through_the_transform(monkeypatch):
    replay = point_replay([(0.0, 0.0), (0.5, 0.0)], num_envs=2)
    learner = PointLearner(lambda e, goal: torch.full(goal.shape[:-1], 0.5 + 0.1 * e))
    selector = DISCOVERTD3(num_candidates=4)
    env, transform = point_env(selector, replay, learner, num_envs=2)
    seen = []
    monkeypatch.setattr(selector, "episodes_ended", lambda reached, values: seen.append(reached.tolist()))
    td = env.reset()
    transform.goal[:] = torch.tensor([[0.25, 0.0], [9.0, 9.0]])  # env 0 reaches its goal at once, env 1 never
    td[keys.GOAL] = transform.goal.clone()
    for _ in range(100):
        td[keys.ACTION] = torch.zeros(2, 2)
        td = env.step(td)
        assert not seen or seen == [[True, False]]
        td = step_mdp(td)
    assert seen == [[True, False]]  # the horizon of 100 steps ends both episodes together


def test_the_dqn_variant_refuses_the_td3_rule():
    learner = PointLearner(None)
    learner.goal_space = goal_space("sun_lightning/ThreeRoom-v0")
    with pytest.raises(ValueError, match="TD3 variant's selection"):
        DISCOVERTD3().bind(learner, 1)


def test_a_single_critic_is_refused():
    selector = DISCOVERTD3()
    selector.bind(PointLearner(None), 1)
    with pytest.raises(ValueError, match="ensemble rules need values"):
        selector.score(torch.rand(1, 5), None)


# ---- reach on the state the step produced --------------------------------------------------------


@pytest.mark.parametrize("num_envs", [1, 2])
def test_a_goal_reached_by_the_step_is_replaced_before_the_next_action(num_envs):
    replay = point_replay([(0.0, 0.0), (-1.0, 0.0)] * num_envs, num_envs=num_envs)
    # V decreases with the goal's distance from x = 3: the fresh goal after a reach is the entry at x = 0 or -1.
    learner = PointLearner(lambda e, goal: 0.9 ** (goal[..., 0] - 3.0).abs(), members=1)
    env, transform = point_env(SUNAdaptive(num_candidates=8), replay, learner, num_envs)
    td = env.reset()
    start = td[keys.OBS].clone()
    action = torch.zeros(num_envs, 2)
    action[:, 0] = 1.0  # +0.5 along x
    # Env 0: the goal lies where the step lands (reached by s_t -> s_{t+1}); the others: a goal 0.01 behind the
    # current state, which the step leaves 0.51 behind (reached on s_t, not on s_{t+1}).
    goal = start.clone()
    goal[0, 0] += 0.5
    goal[1:, 0] -= 0.01
    transform.goal[:] = goal
    transform.value_at_selection.zero_()  # no value drop either
    td[keys.GOAL], td[keys.ACTION] = goal.clone(), action
    nxt = env.step(td)["next"]
    assert nxt[keys.OBS][:, 0].tolist() == pytest.approx((start[:, 0] + 0.5).tolist())
    assert nxt[keys.GOAL_REACHED].tolist() == [True] + [False] * (num_envs - 1)
    assert nxt[keys.GOAL_STEPS].tolist() == [1] + [0] * (num_envs - 1)
    # Replaced at s_{t+1}, before a_{t+1}: the next step's goal is the new one.
    assert nxt[keys.GOAL_SELECTED].tolist() == [True] + [False] * (num_envs - 1)
    assert nxt[keys.GOAL][0].tolist() != goal[0].tolist()
    torch.testing.assert_close(nxt[keys.GOAL][1:], goal[1:])


# ---- held goals --------------------------------------------------------------------------------


def window_step(obs, next_obs, selected, reached, next_selected, next_reselected, end=None):
    b = len(obs)
    flag = lambda x: torch.tensor(x, dtype=torch.bool)  # noqa: E731
    return {keys.OBS: torch.tensor(obs), keys.NEXT_OBS: torch.tensor(next_obs),
            keys.EPISODE_END: flag(end or [False] * b), keys.GOAL_SELECTED: flag(selected),
            keys.GOAL_RESELECTED: torch.zeros(b, dtype=torch.bool), keys.GOAL_REACHED: flag(reached),
            keys.RANDOM_PHASE: torch.zeros(b, dtype=torch.bool), keys.GOAL_STEPS: torch.zeros(b, dtype=torch.long),
            NEXT_SELECTED: flag(next_selected), NEXT_RESELECTED: flag(next_reselected)}


def test_held_unmoved_and_rule_fired_against_a_hand_count():
    stats = CollectionStats()
    # Three envs over four steps. Env 0 pushes into a wall twice holding its goal, then its rule fires on a value
    # drop; env 1 moves; env 2 has no goal until step 2, then stays put while it reaches a goal selected there.
    steps = [
        window_step([[0.0], [1.0], [2.0]], [[0.0], [1.5], [2.0]], [True, True, False], [False] * 3, [False] * 3, [False] * 3),
        window_step([[0.0], [1.5], [2.0]], [[0.0], [2.0], [2.0]], [False] * 3, [False] * 3, [False] * 3, [False] * 3),
        window_step([[0.0], [2.0], [2.0]], [[0.0], [2.5], [2.0]], [False, False, True], [False, False, True],
                    [True, False, True], [True, False, True]),
        window_step([[0.0], [2.5], [2.0]], [[0.5], [3.0], [2.0]], [True, False, True], [False] * 3, [False] * 3, [False] * 3),
    ]
    for step in steps:
        stats.update(step)
    out = stats.pop()
    # held and unmoved: env 0 at steps 0 and 1 (not 2: its goal is replaced at s_3), env 2 at step 3; step 2's
    # env 2 reached its goal.
    assert out["explore/goals/held_unmoved"] == pytest.approx(3 / 12)
    # fired: env 0 at step 2 (its goal not reached); env 2's new goal there follows a reach.
    assert out["explore/goals/rule_fired"] == pytest.approx(1 / 12)


def test_ensemble_values_through_the_target_actor():
    from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF

    torch.manual_seed(0)
    learner = EnsembleTD3SVF(goal_space(POINT_MAZE_S), hidden=32, features=16, maxout_width=64, head_width=32,
                             rbf_centres=5)
    with torch.no_grad():
        for p in learner.actor.parameters():  # the online actor moves away from its target
            p.add_(0.5 * torch.randn_like(p))
    obs, goal = torch.randn(3, 2), torch.randn(3, 4, 2)
    values, _ = learner.goal_values(obs, goal, actor="target")
    expanded = obs.unsqueeze(1).expand(3, 4, 2)
    with torch.no_grad():
        expected = learner.critic_values(expanded, learner.actor_target(expanded, goal), goal)
        online = learner.critic_values(expanded, learner.actor(expanded, goal), goal)
    assert values.shape == (4, 3, 4)
    torch.testing.assert_close(values, expected)
    assert not torch.allclose(values, online)
    torch.testing.assert_close(learner.goal_values(obs, goal)[0], online)


def test_train_stats_from_a_checkpoint_follow_the_updates_device():
    """A run resumed on a GPU adds its updates' statistics to sums its checkpoint loaded on the CPU."""
    from sun_lightning.learners.base import TrainStats

    stats = TrainStats(("a", "b"))
    stats.load_state_dict({"sum": torch.tensor([1.0, 2.0]), "count": 1})
    stats.add(torch.tensor([3.0, 4.0], device="meta"))  # another device than the loaded sums'
    assert stats._sum.device.type == "meta" and stats._count == 2
    resumed = TrainStats(("a", "b"))
    resumed.load_state_dict({"sum": torch.tensor([1.0, 2.0]), "count": 1})
    resumed.add(torch.tensor([3.0, 4.0]))
    assert resumed.pop() == {"a": 2.0, "b": 3.0}
