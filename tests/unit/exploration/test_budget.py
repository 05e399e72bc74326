"""The frame budget is run in whole vector steps: one between two is rounded up, and said so."""

from __future__ import annotations

from types import SimpleNamespace

from sun_lightning.exploration.loop import whole_steps
from sun_lightning.tracking.store import worked_out_bounds


def test_a_budget_between_two_vector_steps_is_rounded_up_with_a_note():
    assert whole_steps(1024, 16) == (1024, None)
    assert whole_steps(1001, 16) == (1008, "note: data.total_frames (1001) is not a whole number of vector steps of "
                                           "16 frames: the run collects 1008 (63 steps)")
    assert whole_steps(5, 4)[0] == 8 and whole_steps(3, 1) == (3, None)


def test_auto_goal_bounds_are_logged_as_the_numbers_worked_out():
    space = SimpleNamespace(low=(-1.5, -1.5), high=(1.5, 1.5))
    params = {"data.goal.low": "auto", "data.goal.high": "auto", "data.num_envs": "16"}
    assert worked_out_bounds(params, space) == {"data.goal.low": "[-1.5, -1.5]", "data.goal.high": "[1.5, 1.5]",
                                                "data.num_envs": "16"}
    given = {"data.goal.low": "[-1.2, -0.07]"}  # given bounds, and no data.goal at all, stay as they are
    assert worked_out_bounds(given, space) == given and worked_out_bounds({}, space) == {}
