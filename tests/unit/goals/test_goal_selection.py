"""SUN adaptive selection (SPEC §1, §3) on hand-made values and counts, in one env and in a vector env."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import TableLearner, filled_replay, goal_env
from sun_lightning import keys
from sun_lightning.goals import SUNAdaptive

NUM_TILES = 72  # ThreeRoom: 9 x 8


def all_candidates(storage, monkeypatch):
    """Make every candidate batch the whole storage, so the argmax is checkable."""
    n = len(storage)
    monkeypatch.setattr(storage, "sample_index", lambda shape, generator=None: torch.arange(n).expand(*shape[:-1], n))


def test_score_is_value_over_count():
    values = torch.tensor([[0.8, 0.0, 0.5, 0.3]])
    counts = torch.tensor([[4.0, 1.0, 2.0, 1.0]])
    torch.testing.assert_close(SUNAdaptive().score(values, counts), torch.tensor([[0.2, 0.0, 0.25, 0.3]]))


def test_reselect_rule():
    rule = SUNAdaptive()
    reached = torch.tensor([True, False, False, False])
    now = torch.tensor([0.5, 0.4, 0.5, 0.6])
    at_sel = torch.tensor([0.5, 0.5, 0.5, 0.5])
    assert rule.should_reselect(reached, now, at_sel).tolist() == [True, True, False, False]


@pytest.mark.parametrize("num_envs", [1, 3])
def test_selects_argmax_and_never_a_zero_value_goal(num_envs, monkeypatch):
    # tile 5 seen 4 times, 10 once (unreachable: V = 0), 20 twice, 30 once
    tiles = [5] * 4 + [10] + [20] * 2 + [30]
    tiles += [30] * (-len(tiles) % num_envs)  # whole vector steps
    replay = filled_replay(tiles, [0] * len(tiles), num_envs=num_envs)
    all_candidates(replay.storage, monkeypatch)
    learner = TableLearner(NUM_TILES)
    learner.table[:, 5], learner.table[:, 20], learner.table[:, 30] = 0.8, 0.5, 0.3
    env, transform = goal_env(SUNAdaptive(), replay, learner, num_envs)
    td = env.reset()
    n = replay.counts(torch.arange(len(replay)))
    counts = {t: n[tiles.index(t)].item() for t in (5, 10, 20, 30)}
    best = max((0.8 / counts[5], 5), (0.5 / counts[20], 20), (0.3 / counts[30], 30))[1]
    assert td[keys.GOAL].argmax(-1).tolist() == [best] * num_envs
    assert td[keys.GOAL_SELECTED].all()

    # Novelty alone would pick the unreachable, least-visited tile 10: it scores 0.
    learner.table.zero_()
    learner.table[:, 5] = 0.01
    td = env.reset()
    assert td[keys.GOAL].argmax(-1).tolist() == [5] * num_envs


@pytest.mark.parametrize("num_envs", [1, 2])
def test_reselects_exactly_on_reach_or_value_drop(num_envs, monkeypatch):
    replay = filled_replay([40] * 2 + [41] * 2, [1, 1, 1, 1], num_envs=2)
    all_candidates(replay.storage, monkeypatch)
    learner = TableLearner(NUM_TILES)
    learner.table[:, 40] = 0.5
    learner.table[:, 41] = 0.1
    env, transform = goal_env(SUNAdaptive(), replay, learner, num_envs)
    td = env.reset()
    assert (td[keys.GOAL].argmax(-1) == 40).all() and (td[keys.GOAL_ACTION] == 1).all()
    start = td[keys.OBS].argmax(-1)

    # Value unchanged at the next state: keep the goal.
    td[keys.ACTION] = torch.zeros(num_envs, dtype=torch.long)  # LEFT: into the edge, stays put
    out = env.step(td)["next"]
    assert not out[keys.GOAL_RESELECTED].any() and not out[keys.GOAL_SELECTED].any()
    assert not out[keys.GOAL_REACHED].any()

    # Value at the current state drops below the value at selection: re-select.
    learner.table[start, 40] = 0.4
    td = env.step(td)
    nxt = td["next"]
    assert nxt[keys.GOAL_RESELECTED].all() and nxt[keys.GOAL_SELECTED].all()
    assert transform.value_at_selection.tolist() == pytest.approx([0.4] * num_envs)

    # Reaching: taking the goal action on the goal tile. Env 0 is given its own
    # tile and action 1 as goal, the others a goal elsewhere.
    td = env.reset()
    here = td[keys.OBS].argmax(-1)
    transform.goal[:] = torch.nn.functional.one_hot(torch.where(torch.arange(num_envs) == 0, here, 71), NUM_TILES).float()
    transform.goal_action[:] = 1
    td[keys.GOAL], td[keys.GOAL_ACTION] = transform.goal.clone(), transform.goal_action.clone()
    td[keys.ACTION] = torch.full((num_envs,), 1)
    nxt = env.step(td)["next"]
    expected = [True] + [False] * (num_envs - 1)
    assert nxt[keys.GOAL_REACHED].tolist() == expected
    assert nxt[keys.GOAL_STEPS].tolist() == [1] + [0] * (num_envs - 1)
    assert nxt[keys.GOAL_RESELECTED][0]


@pytest.mark.parametrize("num_envs", [1, 2])
def test_per_step_switches_only_to_a_strictly_better_candidate(num_envs, monkeypatch):
    from sun_lightning.goals import SUNPerStep

    # tile 40 twice (n = 2), tile 41 twice (n = 2)
    replay = filled_replay([40, 40, 41, 41], [1, 1, 1, 1], num_envs=2)
    all_candidates(replay.storage, monkeypatch)
    learner = TableLearner(NUM_TILES)
    learner.table[:, 40], learner.table[:, 41] = 0.6, 0.2
    env, transform = goal_env(SUNPerStep(num_candidates=4), replay, learner, num_envs)
    td = env.reset()
    assert (td[keys.GOAL].argmax(-1) == 40).all()
    td[keys.ACTION] = torch.zeros(num_envs, dtype=torch.long)
    # A tie (same score) keeps the current goal.
    learner.table[:, 41] = 0.6
    td = env.step(td)
    assert not td["next", keys.GOAL_SELECTED].any() and (td["next", keys.GOAL].argmax(-1) == 40).all()
    # A strictly better candidate takes over at once.
    learner.table[:, 41] = 0.7
    td = env.step(td)
    assert td["next", keys.GOAL_RESELECTED].all() and (td["next", keys.GOAL].argmax(-1) == 41).all()
    assert transform.value_at_selection.tolist() == pytest.approx([0.7] * num_envs)


def test_reach_rules():
    from sun_lightning.envs.registry import goal_space
    from sun_lightning.envs.reach import goal_reached

    car = goal_space("sun_lightning/MountainCar-v0")  # radius rule, rho = 0.1, discrete actions
    scale = torch.tensor([0.5, 0.01])
    achieved = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    goal = torch.tensor([[0.049, 0.0], [0.0, 0.0009], [0.051, 0.0], [0.0, 0.0]])
    action, goal_action = torch.tensor([1, 1, 1, 2]), torch.tensor([1, 1, 1, 1])
    # standardized distances 0.098, 0.09 (inside rho), 0.102 (outside); the last has the wrong action
    assert goal_reached(car, achieved, action, goal, goal_action, scale).tolist() == [True, True, False, False]
    # table layout gives the same answer
    index = torch.arange(4)
    assert goal_reached(car, achieved, action, goal, goal_action, scale, index, index.flip(0)).tolist() == [True, False, True, False]
    with pytest.raises(ValueError, match="scale"):
        goal_reached(car, achieved, action, goal, goal_action)


class TableQLearner(TableLearner):
    """Q(s, a, g) = table[tile(s), tile(g)] · preference[a]: V is the table, the greedy action is 1."""

    preference = torch.tensor([0.2, 1.0, 0.5, 0.3])

    def __init__(self, num_tiles: int) -> None:
        super().__init__(num_tiles)
        self.acts = 0

    def q(self, obs, goal):  # obs [B, D], goal [B, K, G] -> [B, K, A]
        return self.table[obs.argmax(-1).unsqueeze(-1), goal.argmax(-1)].unsqueeze(-1) * self.preference

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        q = self.q(obs, goal)
        return q.amax(-1), q

    def action_values(self, obs, goal, goal_action):
        self.acts += 1
        return self.q(obs, goal.unsqueeze(1))[:, 0]


@pytest.mark.parametrize("num_envs", [1, 3])
def test_the_policy_acts_on_the_values_the_rule_evaluated(num_envs, monkeypatch):
    from sun_lightning.learners.policy import EpsilonGreedyPolicy

    replay = filled_replay([40, 40, 41, 41], [1, 1, 1, 1], num_envs=2)
    all_candidates(replay.storage, monkeypatch)
    learner = TableQLearner(NUM_TILES)
    learner.table[:, 40], learner.table[:, 41] = 0.6, 0.2
    env, transform = goal_env(SUNAdaptive(), replay, learner, num_envs)
    policy = EpsilonGreedyPolicy(learner, 4, epsilon=0.0)
    policy.warmup = False
    td = env.reset()  # selected at reset: the chosen candidate's scoring row
    expected = learner.q(td[keys.OBS], td[keys.GOAL].unsqueeze(1))[:, 0]
    torch.testing.assert_close(td[keys.ACTION_VALUES], expected)
    for _ in range(3):  # kept goals: the adaptive check's row, at the new state
        td = policy(td)
        assert td[keys.ACTION].tolist() == [1] * num_envs and learner.acts == 0
        nxt = env.step(td)["next"]
        assert not nxt[keys.GOAL_SELECTED].any()
        torch.testing.assert_close(nxt[keys.ACTION_VALUES], learner.q(nxt[keys.OBS], nxt[keys.GOAL].unsqueeze(1))[:, 0])
        td = nxt
    # Rules that evaluate nothing per step (episodic) leave NaN: the policy asks the learner.
    from sun_lightning.goals.variants import SUNEpisodic

    env, transform = goal_env(SUNEpisodic(num_candidates=4), replay, learner, num_envs)
    td = env.reset()
    td = policy(td)
    nxt = env.step(td)["next"]
    assert nxt[keys.ACTION_VALUES].isnan().all()
    acts = learner.acts
    assert policy(nxt)[keys.ACTION].tolist() == [1] * num_envs and learner.acts == acts + 1
