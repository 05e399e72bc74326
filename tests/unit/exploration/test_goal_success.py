"""``explore/goals/success`` counts every goal once, when it ends: reached, replaced, or its episode
ended; so the rate lies in [0, 1] for every selection rule, whatever the logging windows."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tests.helpers import THREE_ROOM, TableLearner, filled_replay, goal_env
from sun_lightning import keys
from sun_lightning.exploration.stats import CollectionStats, flat_step as _flat_step
from sun_lightning.envconfig.layout import LAYOUTS
from sun_lightning.goals.ensemble import DISCOVER, AdaGoal
from sun_lightning.goals.sun import SUNAdaptive, SUNPerStep
from sun_lightning.goals.variants import NoveltyOnly, ReachabilityOnly, SUNAdditive, SUNEpisodic


def _step(selected, reached, end, reselected=None) -> dict[str, torch.Tensor]:
    b = len(selected)
    as_bool = lambda x: torch.tensor(x, dtype=torch.bool)  # noqa: E731
    return {keys.EPISODE_END: as_bool(end), keys.GOAL_SELECTED: as_bool(selected), keys.GOAL_REACHED: as_bool(reached),
            keys.GOAL_RESELECTED: as_bool(reselected or [False] * b), keys.RANDOM_PHASE: as_bool([False] * b),
            keys.GOAL_STEPS: torch.where(as_bool(reached), 3, 0)}


def test_success_equals_a_hand_count_on_a_recorded_stream():
    # Two envs, windows of two steps.
    #   env 0: goal A selected at t0, reached at t2 (the next window); B selected at t4, replaced by C at t5.
    #   env 1: goal D selected at t0, its episode ends at t1 unreached; E selected and reached at t2;
    #          F selected at t4. C and F are live when the stream ends: not counted yet.
    stream = [_step([1, 1], [0, 0], [0, 0]),   # t0: A, D selected
              _step([0, 0], [0, 0], [0, 1]),   # t1: D ends with its episode
              _step([0, 1], [1, 1], [0, 0]),   # t2: A reached; E selected and reached
              _step([0, 0], [0, 0], [0, 0]),   # t3
              _step([1, 1], [0, 0], [0, 0]),   # t4: B, F selected
              _step([1, 0], [0, 0], [0, 0])]   # t5: C replaces B
    stats, windows = CollectionStats(), []
    for t, step in enumerate(stream):
        stats.update(step)
        if t % 2 == 1:
            windows.append(stats.pop())
    # by hand: window 0 ends D (unreached); window 1 ends A and E (both reached); window 2 ends B (replaced)
    assert [w["explore/goals/ended"] for w in windows] == [1.0, 2.0, 1.0]
    assert [w["explore/goals/success"] for w in windows] == [0.0, 1.0, 0.0]
    assert [w["explore/goals/selected"] for w in windows] == [2.0, 1.0, 3.0]
    assert [w["explore/goals/reached"] for w in windows] == [0.0, 2.0, 0.0]
    # reached / selected, the rate this replaces, would read 2.0 in window 1
    assert windows[1]["explore/goals/reached"] / windows[1]["explore/goals/selected"] == 2.0
    assert stats.live.tolist() == [True, True]


def test_a_window_where_no_goal_ended_has_no_success_rate():
    """0 of 0 is not a success rate of 0: the metrics line and the summary leave it out."""
    stats = CollectionStats()
    stats.update(_step([1, 1], [0, 0], [0, 0]))  # two goals selected, none ended yet
    window = stats.pop()
    assert window["explore/goals/ended"] == 0.0 and "explore/goals/success" not in window
    stats.update(_step([0, 0], [1, 0], [0, 0]))  # one reached
    assert stats.pop()["explore/goals/success"] == 1.0


class _EnsembleTable(TableLearner):
    """Four value tables, ``[E, B, K]`` values (the ensemble rules' input)."""

    def __init__(self, num_tiles: int, generator: torch.Generator) -> None:
        super().__init__(num_tiles)
        self.tables = torch.rand(4, num_tiles, num_tiles, generator=generator)

    def goal_values(self, obs, goal, goal_action=None, goal_keys=None):
        return self.tables[:, obs.argmax(-1).unsqueeze(-1), goal.argmax(-1)], None


def _reference(steps: list[dict[str, torch.Tensor]], window: int) -> list[tuple[int, int]]:
    """(goals ended, of them reached) per window, goal by goal: a goal selected at step s ends at the next selection
    (replaced, unreached) if that comes before the first step reaching it or ending its episode, else at that step."""
    t_max, b = len(steps), len(steps[0][keys.GOAL_SELECTED])
    out = [[0, 0] for _ in range((t_max + window - 1) // window)]
    for env in range(b):
        col = {name: [bool(s[name][env]) for s in steps] for name in (keys.GOAL_SELECTED, keys.GOAL_REACHED,
                                                                       keys.EPISODE_END)}
        starts = [t for t in range(t_max) if col[keys.GOAL_SELECTED][t]]
        for i, s in enumerate(starts):
            nxt = starts[i + 1] if i + 1 < len(starts) else None
            end = next((t for t in range(s, t_max) if col[keys.GOAL_REACHED][t] or col[keys.EPISODE_END][t]), None)
            if nxt is not None and (end is None or nxt <= end):
                out[nxt // window][0] += 1
            elif end is not None:
                out[end // window][0] += 1
                out[end // window][1] += col[keys.GOAL_REACHED][end]
    return [tuple(w) for w in out]


@pytest.mark.parametrize("rule", [SUNAdaptive, SUNPerStep, SUNEpisodic, SUNAdditive, NoveltyOnly, ReachabilityOnly,
                                  DISCOVER, AdaGoal])
def test_success_lies_in_0_1_for_every_rule_and_matches_a_goal_by_goal_count(rule):
    torch.manual_seed(0)  # the storage draws its candidates from the global generator
    generator = torch.Generator().manual_seed(1)
    layout = LAYOUTS["ThreeRoom"]
    tiles = [t for t in range(layout.num_tiles) if t // layout.cols in (0, 1, 2, 3, 4)]  # rooms 1 and 2
    replay = filled_replay(tiles * 2, [t % 4 for t in tiles * 2])
    learner = _EnsembleTable(layout.num_tiles, generator) if rule in (DISCOVER, AdaGoal) else TableLearner(layout.num_tiles)
    learner.table = torch.rand(layout.num_tiles, layout.num_tiles, generator=generator)
    selector = rule(num_candidates=16)
    env, _ = goal_env(selector, replay, learner, num_envs=4, seed=2)

    def policy(td):
        # towards the goal tile, then the goal action; a random action one time in five
        here, there = td[keys.OBS].argmax(-1), td[keys.GOAL].argmax(-1)
        moves = torch.as_tensor(layout.next_tile[here.numpy()])  # [B, A] tile after each action
        rows, cols = moves // layout.cols, moves % layout.cols
        gap = (rows - (there // layout.cols)[:, None]).abs() + (cols - (there % layout.cols)[:, None]).abs()
        action = torch.where(here == there, td[keys.GOAL_ACTION], gap.argmin(-1))
        noise = torch.rand(len(action), generator=generator) < 0.2
        td[keys.ACTION] = torch.where(noise, torch.randint(4, action.shape, generator=generator), action)
        return td

    rollout = env.rollout(240, policy, break_when_any_done=False)  # [B, T], 2.4 episodes per env
    steps = [_flat_step(rollout[:, t]) for t in range(rollout.shape[1])]
    stats, windows, window = CollectionStats(), [], 7
    for t, step in enumerate(steps):
        stats.update(step)
        if (t + 1) % window == 0 or t + 1 == len(steps):
            windows.append(stats.pop())
    success = [w["explore/goals/success"] for w in windows if w["explore/goals/ended"]]
    assert all(0.0 <= s <= 1.0 for s in success)
    assert all("explore/goals/success" not in w for w in windows if not w["explore/goals/ended"])
    expected = _reference(steps, window)
    assert [(int(w["explore/goals/ended"]), round(w.get("explore/goals/success", 0.0) * w["explore/goals/ended"]))
            for w in windows] == expected
    ended, hits = map(sum, zip(*expected))
    assert ended >= 8 and 0 < hits < ended  # goals of every kind of end: reached and not (episodic: one an episode)
    # goals span windows: some window ends more goals than it selects
    assert any(w["explore/goals/ended"] > w["explore/goals/selected"] for w in windows)
