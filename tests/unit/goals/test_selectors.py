"""SUN variants, indicator ablations, DISCOVER and AdaGoal (SPEC §3) on hand-made values and counts."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import TableLearner, filled_replay, goal_env
from sun_lightning import keys
from sun_lightning.goals.ensemble import DISCOVER, AdaGoal
from sun_lightning.goals.variants import NoveltyOnly, ReachabilityOnly, SUNAdditive, SUNEpisodic

NUM_TILES = 72  # ThreeRoom: 9 x 8
HORIZON = 100  # ThreeRoom's episode length


class EnsembleTableLearner(TableLearner):
    """E value tables: V_i(s, g) = table[i, tile(s), tile(g)], values ``[E, B, K]``."""

    def __init__(self, num_tiles: int, members: int) -> None:
        self.table = torch.zeros(members, num_tiles, num_tiles)

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        return self.table[:, obs.argmax(-1).unsqueeze(-1), goal.argmax(-1)], None


def pick(rule, values, counts) -> list[int]:
    return rule.score(values, counts).argmax(-1).tolist()


# ---- scores on hand-made numbers -----------------------------------------------------------
def test_episodic_sun_scores_value_over_count_with_2500_candidates():
    rule = SUNEpisodic()
    values = torch.tensor([[0.8, 0.0, 0.5, 0.3]])
    counts = torch.tensor([[4.0, 1.0, 2.0, 1.0]])
    torch.testing.assert_close(rule.score(values, counts), torch.tensor([[0.2, 0.0, 0.25, 0.3]]))
    assert pick(rule, values, counts) == [3]
    assert rule.num_candidates == 2500 and rule.episodic and not rule.adaptive and rule.uses_goals and rule.learns


def test_additive_bonus_is_ucb1_over_the_candidate_total():
    values = torch.tensor([[0.5, 0.2, 0.0], [0.9, 0.0, 0.1]])
    counts = torch.tensor([[4.0, 1.0, 2.0], [1.0, 9.0, 30.0]])
    # Row 0: N_tot = 7; row 1: N_tot = 40 (each env's own candidate batch).
    expected = torch.tensor(
        [
            [0.5 + math.sqrt(math.log(7) / 4), 0.2 + math.sqrt(math.log(7)), 0.0 + math.sqrt(math.log(7) / 2)],
            [0.9 + math.sqrt(math.log(40)), 0.0 + math.sqrt(math.log(40) / 9), 0.1 + math.sqrt(math.log(40) / 30)],
        ]
    )
    rule = SUNAdditive()
    torch.testing.assert_close(rule.score(values, counts), expected)
    # 1.5950 beats 1.1975: the rarer, less reachable goal wins row 0.
    assert pick(rule, values, counts) == [1, 0]
    # Integer counts (the radius pseudocount's int64) score the same.
    torch.testing.assert_close(rule.score(values, counts.long()), expected)


def test_novelty_and_reachability_only_ignore_the_other_term():
    values = torch.tensor([[0.8, 0.0, 0.5, 0.3]])
    counts = torch.tensor([[4, 1, 2, 3]])  # int64 as from the radius pseudocount
    torch.testing.assert_close(NoveltyOnly().score(values, counts), torch.tensor([[0.25, 1.0, 0.5, 1 / 3]]))
    assert pick(NoveltyOnly(), values, counts) == [1]  # the unreachable, least-visited goal
    assert pick(ReachabilityOnly(), values, counts) == [0]  # the most reachable, most visited goal
    for rule in (SUNAdditive(), NoveltyOnly(), ReachabilityOnly()):
        assert rule.num_candidates == 256 and rule.adaptive and not rule.episodic


# Four critics, three candidates: (μ, σ) = (0.9, 0), (0.6, 0.1), (0.12, 0.12), σ with divisor E.
ENSEMBLE_VALUES = torch.tensor([[0.9, 0.5, 0.0], [0.9, 0.7, 0.24], [0.9, 0.5, 0.0], [0.9, 0.7, 0.24]]).unsqueeze(1)


def test_discover_and_adagoal_on_hand_chosen_mean_and_std():
    counts = torch.ones(1, 3)
    discover = DISCOVER()
    assert discover.beta == 10.0 and discover.num_candidates == 2500 and discover.episodic
    torch.testing.assert_close(discover.score(ENSEMBLE_VALUES, counts), torch.tensor([[0.9, 1.6, 1.32]]))
    torch.testing.assert_close(AdaGoal().score(ENSEMBLE_VALUES, counts), torch.tensor([[0.0, 0.1, 0.12]]))
    assert pick(discover, ENSEMBLE_VALUES, counts) == [1]  # reachable and uncertain
    assert pick(AdaGoal(), ENSEMBLE_VALUES, counts) == [2]  # most uncertain, barely reachable
    assert pick(DISCOVER(beta=1.0), ENSEMBLE_VALUES, counts) == [0]  # β = 1: reachability dominates
    assert AdaGoal().episodic and AdaGoal().num_candidates == 2500


def test_ensemble_rules_need_ensemble_values():
    with pytest.raises(ValueError, match="E, B, K"):
        DISCOVER().score(torch.rand(2, 5), torch.ones(2, 5))
    with pytest.raises(ValueError, match="E, B, K"):
        AdaGoal().score(torch.rand(2, 5), torch.ones(2, 5))


def test_reselection_rules():
    reached = torch.tensor([True, False, False, False])
    now = torch.tensor([0.5, 0.4, 0.5, 0.6])
    at_sel = torch.tensor([0.5, 0.5, 0.5, 0.5])
    for rule in (SUNEpisodic(), DISCOVER(), AdaGoal()):
        # Episodic rules drop a goal only on reaching it, whatever its value does.
        assert rule.should_reselect(reached, now, at_sel).tolist() == [True, False, False, False]
    for rule in (SUNAdditive(), NoveltyOnly(), ReachabilityOnly()):
        assert rule.should_reselect(reached, now, at_sel).tolist() == [True, True, False, False]


# ---- through the transform -----------------------------------------------------------------
def all_candidates(storage, monkeypatch):
    n = len(storage)
    monkeypatch.setattr(storage, "sample_index", lambda shape, generator=None: torch.arange(n).expand(*shape[:-1], n))


def episodic_setup(rule_name, monkeypatch):
    # tile 5 seen 4 times, tile 20 twice, tile 30 once; all with goal action 1.
    tiles = [5] * 4 + [20] * 2 + [30]
    replay = filled_replay(tiles, [1] * len(tiles))
    all_candidates(replay.storage, monkeypatch)
    if rule_name == "sun":
        learner = TableLearner(NUM_TILES)
        learner.table[:, 5], learner.table[:, 20], learner.table[:, 30] = 0.8, 0.5, 0.1
        best = 20  # 0.8/4 = 0.2 < 0.5/2 = 0.25 > 0.1/1
        rule = SUNEpisodic()
    else:
        learner = EnsembleTableLearner(NUM_TILES, 4)
        learner.table[:, :, 5] = 0.9
        learner.table[:, :, 20] = torch.tensor([0.5, 0.7, 0.5, 0.7])[:, None]
        learner.table[:, :, 30] = torch.tensor([0.0, 0.24, 0.0, 0.24])[:, None]
        best = {"discover": 20, "adagoal": 30}[rule_name]
        rule = DISCOVER() if rule_name == "discover" else AdaGoal()
    return replay, learner, rule, best


@pytest.mark.parametrize("rule_name", ["sun", "discover", "adagoal"])
def test_episodic_goal_then_random_phase_until_the_episode_ends(rule_name, monkeypatch):
    replay, learner, rule, best = episodic_setup(rule_name, monkeypatch)
    env, transform = goal_env(rule, replay, learner, num_envs=1)
    td = env.reset()
    assert td[keys.GOAL].argmax(-1).tolist() == [best] and td[keys.GOAL_SELECTED].all()
    assert not td[keys.RANDOM_PHASE].any()
    if rule_name == "discover":
        # value_at_selection is the ensemble mean of the chosen goal.
        assert transform.value_at_selection.tolist() == pytest.approx([0.6])

    # The value of the goal drops: an episodic rule keeps it.
    learner.table.zero_()
    td[keys.ACTION] = torch.zeros(1, dtype=torch.long)  # not the goal action: cannot reach
    td, root = env.step_and_maybe_reset(td)
    assert not td["next", keys.GOAL_SELECTED].any() and not td["next", keys.RANDOM_PHASE].any()
    assert root[keys.GOAL].argmax(-1).tolist() == [best]

    # Reach: give the env its own tile and action 1 as goal, take action 1.
    here = root[keys.OBS].argmax(-1)
    transform.goal[:] = torch.nn.functional.one_hot(here, NUM_TILES).float()
    transform.goal_action[:] = 1
    root[keys.GOAL], root[keys.GOAL_ACTION] = transform.goal.clone(), transform.goal_action.clone()
    root[keys.ACTION] = torch.ones(1, dtype=torch.long)
    td, root = env.step_and_maybe_reset(root)
    assert td["next", keys.GOAL_REACHED].all() and td["next", keys.RANDOM_PHASE].all()
    assert not td["next", keys.GOAL_SELECTED].any()

    # Random phase until the episode ends: no goal is drawn.
    steps = 2
    while not td["next", keys.DONE].any():
        root[keys.ACTION] = torch.randint(4, (1,))
        td, root = env.step_and_maybe_reset(root)
        steps += 1
        nxt = td["next"]
        assert nxt[keys.RANDOM_PHASE].all() and not nxt[keys.GOAL_SELECTED].any() and not nxt[keys.GOAL_REACHED].any()
        if not nxt[keys.DONE].any():  # at the end the autoreset already drew the next episode's goal
            assert not transform.has_goal.any()
        assert steps <= HORIZON
    assert steps == HORIZON  # ThreeRoom never terminates: truncation at the horizon
    # After the reset a goal is drawn again and the random phase is over.
    assert root[keys.GOAL_SELECTED].all() and not root[keys.RANDOM_PHASE].any()
    assert transform.has_goal.all()
