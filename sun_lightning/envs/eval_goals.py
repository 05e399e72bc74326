"""The fixed evaluation goals of each environment (the goal-reaching evaluation of JaxGCRL and DISCOVER).

A goal-reaching evaluation pursues the same goals at every evaluation, from the environment's start
states, so that its success rate is a curve over training. Which goals those are is a fact of the
environment, like its goal projection and reach rule (SPEC §9: they live with the registration, not
in the trainer): every environment module registers a function beside its environment with
:func:`register_eval_goals`, and :func:`eval_goals` reads it by id.

The sets (built in the environment modules):

- point and ant mazes: the centre of every free cell;
- ArmPush-H: a grid of cube positions on the table within the arm's reach;
- classic control: a grid over the goal bounds (× every goal action);
- gridworlds: every free tile where an action can be taken (× every goal action).

An environment from outside the package (``data.goal``, docs/custom-envs.md) has none registered: for it
:func:`configured_eval_goals` builds a grid over its goal bounds, or takes the goals a config lists
(``eval.goals``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import math

import torch

from sun_lightning.envs.maze_map import recorded_maze
from sun_lightning.errors import ConfigError


@dataclass(frozen=True, eq=False)
class EvalGoals:
    """A fixed set of N evaluation goals.

    Attributes:
        goal: goal projections ``[N, goal_dim]`` (float32).
        goal_action: goal actions ``[N]`` (long) where goals include an action (discrete spaces), else ``None``.
    """

    goal: torch.Tensor
    goal_action: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.goal.shape[0]

    def subset(self, max_goals: int | None) -> EvalGoals:
        """At most ``max_goals`` of the goals, evenly spaced through the set (the same ones every time)."""
        n = len(self)
        if max_goals is None or n <= max_goals:
            return self
        index = torch.linspace(0, n - 1, max_goals).round().long().unique()
        return EvalGoals(self.goal[index], None if self.goal_action is None else self.goal_action[index])


_EVAL_GOALS: dict[str, Callable[[], EvalGoals]] = {}


_BUILT: dict[str, EvalGoals] = {}


def register_eval_goals(env_id: str, make: Callable[[], EvalGoals]) -> None:
    """Record the function building ``env_id``'s evaluation goals (called beside the environment's registration;
    registering an id again, as a new gridworld layout does, replaces its goals)."""
    _EVAL_GOALS[env_id] = make
    _BUILT.pop(env_id, None)


def has_eval_goals(env_id: str) -> bool:
    return env_id in _EVAL_GOALS


def eval_goals(env_id: str) -> EvalGoals:
    """The evaluation goals of a registered environment.

    Raises:
        KeyError: the environment registered none (an environment added from outside the package).
    """
    if env_id not in _EVAL_GOALS:
        raise KeyError(f"{env_id} has no evaluation goals: register them with "
                       "sun_lightning.envs.eval_goals.register_eval_goals, or set eval.every_frames 0")
    if env_id not in _BUILT:
        _BUILT[env_id] = _EVAL_GOALS[env_id]()
    return _BUILT[env_id]


def grid_points(axes: Sequence[Sequence[float]]) -> torch.Tensor:
    """Every combination of the per-dimension values ``axes`` ``[∏ len(axis), len(axes)]``, the last axis fastest."""
    return torch.tensor(list(itertools.product(*axes)), dtype=torch.float32)


def linspace_axes(low: Sequence[float], high: Sequence[float], counts: Sequence[int]) -> list[list[float]]:
    """``counts[d]`` evenly spaced values from ``low[d]`` to ``high[d]`` for each dimension d."""
    return [torch.linspace(lo, hi, n, dtype=torch.float64).tolist() for lo, hi, n in zip(low, high, counts)]


def with_actions(goal: torch.Tensor, num_actions: int) -> EvalGoals:
    """Every goal projection paired with every goal action (goal-major): ``N × num_actions`` goals."""
    return EvalGoals(goal.repeat_interleave(num_actions, 0), torch.arange(num_actions).repeat(goal.shape[0]))


def bounds_grid(space, max_goals: int) -> EvalGoals:
    """A grid over the goal bounds of ``space`` (a :class:`~sun_lightning.envs.registry.GoalSpace`):
    ``⌊max_goals^(1/d)⌋`` (at least 2) evenly spaced values per goal dimension, from low to high, × every goal
    action on discrete spaces.

    Raises:
        ConfigError: a goal dimension without finite bounds.
    """
    for d, (lo, hi) in enumerate(zip(space.low, space.high)):
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ConfigError(f"eval.goals: goal dimension {d} has no finite bounds ({lo}, {hi}) to lay a grid over; "
                              "list the goals (eval.goals: [[...], ...]) or set eval.every_frames 0")
    per_dim = max(2, int(math.floor(max_goals ** (1.0 / space.goal_dim) + 1e-9)))
    goal = grid_points(linspace_axes(space.low, space.high, [per_dim] * space.goal_dim))
    return with_actions(goal, space.num_actions) if space.discrete else EvalGoals(goal)


def configured_eval_goals(env_id: str, space, goals: str | Sequence[Sequence[float]], max_goals: int | None) -> EvalGoals:
    """The evaluation goals a run's config asks for.

    Args:
        env_id: the run's environment.
        space: its goal space.
        goals: ``"auto"`` (the environment's registered set; a maze from outside the package with a map: the centre
            of every free cell; else a grid over its goal bounds), ``"grid"`` (a grid
            over the goal bounds, :func:`bounds_grid`) or a list of goals: each the goal projection's
            ``goal_dim`` values, followed on discrete-action spaces by the goal action.
        max_goals: the most goals evaluated (the grid's size; ``None``: 256 for a grid).

    Raises:
        ConfigError: an unknown value, or a listed goal of the wrong length or with an action out of range.
    """
    if isinstance(goals, str):
        if goals == "auto" and has_eval_goals(env_id):
            return eval_goals(env_id)
        maze = recorded_maze(env_id)
        if goals == "auto" and maze is not None and space.goal_dim == 2 and not space.discrete:
            return EvalGoals(torch.from_numpy(maze.free_centres()).float())
        if goals in ("auto", "grid"):
            return bounds_grid(space, max_goals or 256)
        raise ConfigError(f"eval.goals must be auto, grid or a list of goals, got {goals!r}")
    width = space.goal_dim + (1 if space.discrete else 0)
    rows = [list(goal) for goal in goals]
    if not rows:
        raise ConfigError("eval.goals: the list of goals is empty")
    for i, row in enumerate(rows):
        if len(row) != width:
            what = f"{space.goal_dim} goal values and a goal action" if space.discrete else f"{space.goal_dim} goal values"
            raise ConfigError(f"eval.goals[{i}] has {len(row)} values; {env_id}'s goals take {what}")
    table = torch.tensor(rows, dtype=torch.float32)
    if not space.discrete:
        return EvalGoals(table)
    action = table[:, -1]
    if not bool(((action == action.round()) & (action >= 0) & (action < space.num_actions)).all()):
        raise ConfigError(f"eval.goals: a goal action must be an integer in [0, {space.num_actions}), "
                          f"got {action.tolist()}")
    return EvalGoals(table[:, :-1].contiguous(), action.long())
