"""The successor value function a run learned, drawn whole: V(s, g) over states for a grid of goals (the paper's
appendix "Successor value function visualization", Figure 37: "many sub-heatmaps, one per goal state").

The picture is a grid of blocks, one per goal g; inside a block, each pixel is a state s and its colour V(s, g) on
[0, 1]; a red dot marks g itself, where V(·, g) should peak. Blocks and pixels share one layout, the goal space's
picture (:class:`~sun_lightning.results.goal_grid.GoalGrid`): a gridworld's tiles, or bins of the two drawn axes, so a
block sits where its goal lies. As the paper says, this needs states that are points of that picture: gridworlds,
two-dimensional states (MountainCar, PointMaze-S) and Pendulum, whose (cos θ, sin θ, θ̇) is drawn as (θ, θ̇).

V(s, g_s) = max over goal actions of the learner's V(s, g_s, g_a) (SPEC §2's goals are pairs on discrete actions);
ensembles show their members' mean. The learner is rebuilt from the checkpoint and evaluated in eval mode (dropout
off: the function learned, not one noisy draw of it).

``python -m sun_lightning.results.svf_maps CKPT [CKPT ...] --out FILE.png`` draws one panel per checkpoint.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sun_lightning.checkpoints.safe_pickle import read_checkpoint
from sun_lightning.envs.registry import goal_space
from sun_lightning.learners.base import Learner
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.figure_cli import checkpoint_parser, read_each, write
from sun_lightning.results.heatmaps import _colorbar
from sun_lightning.results.value_maps import evaluation

#: Goals per axis (blocks) and states per axis inside a block, for binned spaces.
GOALS_PER_AXIS, STATES_PER_AXIS = 8, 24
_CHUNK = 64  # states per learner call


def accepted_arguments(cls: type) -> set[str]:
    """The keyword arguments a learner class takes: its own, and its bases' where it passes ``**kwargs`` on."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names - {"self"}


def load_learner(path: str | Path) -> tuple[Learner, str]:
    """The learner of a run checkpoint, rebuilt from its recorded class and arguments, and its environment id.

    Raises:
        ValueError: the file is not a checkpoint of a run of this package.
    """
    state = read_checkpoint(str(path))
    hparams, run = state.get("hyper_parameters"), state.get("sun_run")
    if not isinstance(hparams, dict) or "_class_path" not in hparams or not isinstance(run, dict):
        raise ValueError(f"{path} is not a checkpoint of a sun_lightning run (no learner class and 'sun_run' in it)")
    module, name = hparams["_class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    arguments = {k: v for k, v in hparams.items() if not k.startswith("_")}
    known = accepted_arguments(cls)
    gone = sorted(set(arguments) - set(known))
    if gone:  # a checkpoint of an older version: its networks must still load whole (strict) below
        warnings.warn(f"{path}: {name} of this version has no argument {', '.join(gone)}; drawing without them")
    learner = cls(goal_space=goal_space(run["env_id"]), **{k: v for k, v in arguments.items() if k in known})
    learner.load_state_dict(state["state_dict"])
    return learner.eval(), run["env_id"]


def plane_goals(grid: GoalGrid, per_axis: int) -> torch.Tensor:
    """``per_axis²`` goal projections ``[per_axis², goal_dim]`` at the centres of a ``per_axis × per_axis`` grid over
    the drawn plane, row-major with y (the second axis) as the row, as the picture's bins.

    Raises:
        ValueError: the two drawn axes do not determine a goal (a goal space with dimensions the picture leaves out).
    """
    covered = [d for axis in grid.axes for d in (axis if isinstance(axis, tuple) else (axis,))]
    if sorted(covered) != list(range(grid.space.goal_dim)):
        raise ValueError(f"{grid.env_id}: its {grid.space.goal_dim}-D goals are not points of the drawn plane "
                         f"(axes {grid.axes}), so V(s, g) has no picture")
    centres = []
    for lo, hi in zip(grid.low, grid.high):
        edges = torch.linspace(lo, hi, per_axis + 1, dtype=torch.float64)
        centres.append((edges[:-1] + edges[1:]) / 2)
    ys, xs = torch.meshgrid(centres[1], centres[0], indexing="ij")
    goals = torch.zeros(per_axis * per_axis, grid.space.goal_dim, dtype=torch.float64)
    for axis, coordinate in zip(grid.axes, (xs.reshape(-1), ys.reshape(-1))):
        if isinstance(axis, tuple):
            goals[:, axis[0]], goals[:, axis[1]] = torch.cos(coordinate), torch.sin(coordinate)
        else:
            goals[:, axis] = coordinate
    return goals.float()


def points(grid: GoalGrid, per_axis: int) -> tuple[torch.Tensor, tuple[int, int], np.ndarray | None]:
    """The goals of the picture ``[K, goal_dim]``, its shape ``(rows, cols)`` and its wall mask (tiles: every tile,
    its one-hot observation; bins: :func:`plane_goals`)."""
    if grid.tiles:
        return grid.centres(), grid.shape, grid.wall
    return plane_goals(grid, per_axis), (per_axis, per_axis), None


def no_picture(env_id: str) -> str | None:
    """Why V(s, g) of ``env_id`` has no picture here (its states are not points of its goal picture), or ``None``."""
    grid, space = GoalGrid.of(env_id), goal_space(env_id)
    if space.obs_dim != space.goal_dim or (space.goal_dims is not None and tuple(space.goal_dims) != tuple(range(space.obs_dim))):
        return (f"{env_id}: a state ({space.obs_dim}-D) is not its goal projection ({space.goal_dim}-D, goal dims "
                f"{space.goal_dims}), so V(s, g) over states has no picture (gridworlds, 2-D states and Pendulum have one)")
    if not grid.tiles:
        try:
            plane_goals(grid, 1)
        except ValueError as error:
            return str(error)
    return None


def nested_values(learner: Learner, env_id: str, goals_per_axis: int = GOALS_PER_AXIS,
                  states_per_axis: int = STATES_PER_AXIS) -> np.ndarray:
    """The image ``[R·r, C·c]``: block ``(i, j)`` of the goal picture ``R × C`` holds V(s, g_ij) over the state
    picture ``r × c`` (NaN on walls: as state or as goal).

    Raises:
        ValueError: the environment's states are not points of its goal picture.
    """
    reason = no_picture(env_id)
    if reason:
        raise ValueError(reason)
    grid, space = GoalGrid.of(env_id), goal_space(env_id)
    goals, (R, C), wall = points(grid, goals_per_axis)
    states, (r, c), _ = points(grid, states_per_axis)
    actions = space.num_actions
    candidates = goals.repeat_interleave(actions, 0) if actions else goals
    goal_action = torch.arange(actions).repeat(len(goals)) if actions else None
    device = learner.device
    rows = []
    with evaluation(device):
        for start in range(0, len(states), _CHUNK):
            obs = states[start:start + _CHUNK].to(device)
            b = len(obs)
            values, _ = learner.goal_values(obs, candidates.to(device).expand(b, -1, -1),
                                            None if goal_action is None else goal_action.to(device).expand(b, -1))
            values = values.mean(0) if values.dim() == 3 else values  # ensembles: the members' mean
            if actions:
                values = values.view(b, len(goals), actions).amax(-1)  # V(s, g_s) = max over g_a
            rows.append(values.float().cpu())
    table = torch.cat(rows).double().numpy()  # [states, goals]
    if wall is not None:
        table[wall.reshape(-1), :] = np.nan
        table[:, wall.reshape(-1)] = np.nan
    # [r, c, R, C] → [R, r, C, c]: goal blocks, states inside
    return table.reshape(r, c, R, C).transpose(2, 0, 3, 1).reshape(R * r, C * c)


def svf_figure(panels: dict[str, tuple[Learner, str]], goals_per_axis: int = GOALS_PER_AXIS,
               states_per_axis: int = STATES_PER_AXIS) -> Figure:
    """One panel per run (label → (learner, env id)), two per row, V on one linear [0, 1] scale."""
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(5.2 * columns + 0.8, 5.0 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False).reshape(-1)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    mapped = None
    for ax, (label, (learner, env_id)) in zip(axes, panels.items()):
        grid = GoalGrid.of(env_id)
        image = nested_values(learner, env_id, goals_per_axis, states_per_axis)
        goals, (R, C), wall = points(grid, goals_per_axis)
        r, c = image.shape[0] // R, image.shape[1] // C
        lower = not grid.tiles  # bins: y up, as the other heatmaps
        colours = matplotlib.colormaps["viridis"].with_extremes(bad=(0.55, 0.55, 0.55, 1.0))
        mapped = ax.imshow(image, cmap=colours, vmin=0.0, vmax=1.0, interpolation="nearest",
                           origin="lower" if lower else "upper")
        for i in range(1, R):
            ax.axhline(i * r - 0.5, color="white", linewidth=0.4)
        for j in range(1, C):
            ax.axvline(j * c - 0.5, color="white", linewidth=0.4)
        # each goal, at its own place inside its block
        marks = []
        for k in range(len(goals)):
            i, j = divmod(k, C)
            if wall is not None and wall.reshape(-1)[k]:
                continue
            if grid.tiles:
                marks.append((j * c + j, i * r + i))  # the goal tile inside its own block
            else:
                u = (i + 0.5) / R * r - 0.5  # the goal's bin centre, in the block's state pixels
                v = (j + 0.5) / C * c - 0.5
                marks.append((j * c + v, i * r + u))
        if marks:
            xs, ys = zip(*marks)
            ax.scatter(xs, ys, s=4, c="red", linewidths=0)
        ax.set_xticks([])
        ax.set_yticks([])
        names = grid.axis_labels
        ax.set_xlabel(f"{names[0]}: of the goal (blocks) and of the state (inside)", fontsize=7)
        ax.set_ylabel(f"{names[1]}", fontsize=7)
        ax.set_title(label, fontsize=8)
    _colorbar(fig, mapped, ax=list(axes[:len(panels)]), location="right", shrink=0.7, label="V(s, g)")
    fig.suptitle("V(s, g): one block per goal g (red dot), states inside", fontsize=10)
    return fig


def main(argv: Sequence[str] | None = None) -> None:
    parser = checkpoint_parser("sun_lightning.results.svf_maps", __doc__, "panel")
    parser.add_argument("--goals", type=int, default=GOALS_PER_AXIS, help="goals per axis, binned spaces (default: %(default)s)")
    parser.add_argument("--states", type=int, default=STATES_PER_AXIS, help="states per axis, binned spaces (default: %(default)s)")
    args = parser.parse_args(argv)
    if min(args.goals, args.states) < 1:
        parser.error(f"--goals and --states must be ≥ 1, got {args.goals} and {args.states}")
    panels = {}
    for path, (learner, env_id) in zip(args.checkpoints, read_each(parser, args.checkpoints, load_learner)):
        if no_picture(env_id):
            parser.error(no_picture(env_id))
        panels[f"{env_id.split('/')[-1]}: {path.parent.name or path.name}"] = (learner, env_id)
    write(svf_figure(panels, args.goals, args.states), args.out)


if __name__ == "__main__":
    main()
