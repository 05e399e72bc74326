"""The kinematic point mazes PointMaze-S (2-D) and PointMaze-H (4-D) of SPEC §6.

No physics: a position ``p`` (float32) starts uniform in ``[-0.1, 0.1]^d`` and a step moves it to
``p + 0.5 * clip(a, -1, 1)`` unless that lands in a wall cell, in which case it stays. Only the
destination is tested (SPEC §6), so the point may cut the corner between two diagonally adjacent free
cells; as a step moves at most 0.5 per axis and cells are at least 1 wide, it can never jump over a wall.
The cell along axis ``i`` is ``int(p_i) + offset`` (truncation toward zero, as the original), so the
centre cell spans ``(-1, 1)``. Cells outside the grid are walls; both maps have wall borders, so
clamping the index onto the border is the outside test.

PointMaze-H is the paper's 4-D maze: the walls of ``maze_layouts/rand_4d_5h.pkl`` in DISCOVER's public
code (GitHub repository LeanderDiazBone/discover, commit 52c14285ae654af14891b84dc9c3de19be9fa7c1), which
the paper's GCRL runs used (its appendix: "the official implementation of DISCOVER"). They ship as
``data/point_maze_h.txt`` (rewrite it from the pickle with ``python -m sun_lightning.envs.point_maze
--write-h rand_4d_5h.pkl``); the original indexes ``walls[int(p) + radius + 1]`` with radius 5, i.e.
``int(p_i) + 6`` along axis ``i``, as here. Its fingerprint: 2594 free cells (9.1 %), every one reachable
from the start cell ``(6, 6, 6, 6)``, 34 dead ends, many loops, the farthest cell 21 corridor steps from
the start (within one episode: 100 steps of at most 0.5 along a corridor).

Both :class:`PointMazeEnv` (for :func:`gymnasium.make`) and the batched :class:`PointMazeVectorEnv`
(for :func:`gymnasium.make_vec`) step through :meth:`MazeDynamics.move`. Rewards are 0, episodes are
never terminated, only truncated at the horizon of 100 steps.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from importlib import resources
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sun_lightning.envs.eval_goals import EvalGoals, register_eval_goals
from sun_lightning.envs.registry import GoalSpace, end_step, refuse_ended, register, reset_mask, torchrl_autoreset_mode

HORIZON = 100
STEP_SCALE = 0.5  # p <- p + 0.5 * a
START_HALF_WIDTH = 0.1  # p_0 ~ U[-0.1, 0.1]^d
ACTION_TOL = 1e-6  # actions this far outside [-1, 1] are rounding noise and clipped, beyond it an error
WALL, FREE = "#", "."

# SPEC §6: row = first coordinate's cell, column = second's; row 12 repeats for rows 12 to 21.
_S_TOP = """
#######################
##.####################
##.##################.#
##.##################.#
##.##################.#
##.##################.#
##.#########.########.#
##.#########.########.#
#............########.#
#####.#####..########.#
#####.#####..########.#
#####.................#
"""
S_MAP = _S_TOP.strip().splitlines() + ["#####################.#"] * 10 + ["#" * 23]

H_SIZE, H_DIM = 13, 4
H_FILE = "point_maze_h.txt"
H_SOURCE = ("The walls of maze_layouts/rand_4d_5h.pkl of DISCOVER's public code (GitHub repository "
            "LeanderDiazBone/discover, commit 52c14285ae654af14891b84dc9c3de19be9fa7c1).")
_H_HEADER = "% "  # header lines of the data file; '#' is taken by walls


def format_h(wall: np.ndarray) -> str:
    """The data-file text of a 4-D wall grid: a block of ``[i2, i3]`` rows per ``(i0, i1)``, i0-major."""
    lines = [f"{_H_HEADER}PointMaze-H (SPEC §6): {H_SIZE}^{H_DIM} cells, '{WALL}' wall, '{FREE}' free, cell = int(p_i) + 6.",
             f"{_H_HEADER}{H_SOURCE}",
             f"{_H_HEADER}One block per (i0, i1), i0-major; in a block, line i2 and character i3."]
    for i0, i1 in itertools.product(range(H_SIZE), repeat=2):
        lines += [""] + ["".join(WALL if w else FREE for w in row) for row in wall[i0, i1]]
    return "\n".join(lines) + "\n"


def read_discover_layout(path: str | Path) -> np.ndarray:
    """The wall grid (bool) of a maze layout pickle of DISCOVER's code: a dict whose ``walls`` is a float array.

    The pickle is read with an allow-list of numpy's array classes, so a file that names anything else stops
    the read before it runs.
    """
    import pickle

    allowed = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if (module, name) not in allowed:
                raise ValueError(f"{path}: a maze layout may hold numpy arrays only, found {module}.{name}")
            return super().find_class(module, name)

    with open(path, "rb") as f:
        layout = Unpickler(f).load()
    walls = np.asarray(layout["walls"])
    if walls.shape != (H_SIZE,) * H_DIM or layout.get("n_dim") != H_DIM:
        raise ValueError(f"{path}: not a {H_SIZE}^{H_DIM} layout (walls {walls.shape}, n_dim {layout.get('n_dim')})")
    return walls != 0


def parse_h(text: str) -> np.ndarray:
    """Inverse of :func:`format_h`."""
    chars = "".join(line for line in text.splitlines() if not line.startswith(_H_HEADER))
    if len(chars) != H_SIZE**H_DIM or set(chars) - {WALL, FREE}:
        raise ValueError(f"not a {H_SIZE}^{H_DIM} PointMaze-H grid of '{WALL}'/'{FREE}' ({len(chars)} cells)")
    return (np.frombuffer(chars.encode(), dtype=np.uint8) == ord(WALL)).reshape((H_SIZE,) * H_DIM)


def h_path() -> Path:
    return Path(str(resources.files("sun_lightning.envs") / "data" / H_FILE))


# name -> (dim, offset, goal/metric bound low, high, pseudocount radius rho), SPEC §4, §6
MAZES: dict[str, tuple[int, int, float, float, float]] = {
    "PointMazeS": (2, 11, -11.0, 12.0, 0.1),
    "PointMazeH": (H_DIM, 6, -6.0, 7.0, 0.5),
}


@functools.cache
def maze_wall(name: str) -> np.ndarray:
    """The read-only wall grid ``[size] * dim`` (bool) of maze ``name``, built once (PointMaze-H from its file).

    Index ``(c_0, ..., c_{d-1})`` with ``c_i = int(p_i) + offset``; the start cell is ``(offset,) * dim``.
    """
    if name not in MAZES:
        raise ValueError(f"unknown maze {name!r}; known mazes: {', '.join(MAZES)}")
    if name == "PointMazeS":
        wall = np.array([[c == WALL for c in row] for row in S_MAP])
    else:
        wall = parse_h(h_path().read_text())
    offset = MAZES[name][1]
    border = np.ones_like(wall)
    border[(slice(1, -1),) * wall.ndim] = False
    # move() maps outside points onto the border, which is only right if the border is wall.
    if not wall[border].all() or wall[(offset,) * wall.ndim]:
        raise ValueError(f"{name}: the border must be walls and the start cell free")
    wall.setflags(write=False)
    return wall


class MazeDynamics:
    """The batched step of one maze on one torch device: a handful of tensor ops for all agents.

    Args:
        maze_name: a name of :data:`MAZES`.
        device: where positions, actions and the wall table live.
    """

    def __init__(self, maze_name: str, device: torch.device | str = "cpu") -> None:
        wall = maze_wall(maze_name)
        self.name, self.device = maze_name, torch.device(device)
        self.dim, self.size, self.offset = wall.ndim, wall.shape[0], MAZES[maze_name][1]
        self.wall = torch.tensor(wall.reshape(-1), device=self.device)
        self.strides = torch.tensor([self.size ** (self.dim - 1 - i) for i in range(self.dim)], device=self.device)

    def starts(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``[n, dim]`` start positions, uniform in ``[-0.1, 0.1]^dim``."""
        u = torch.rand(n, self.dim, generator=generator, device=self.device)
        return u.mul_(2 * START_HALF_WIDTH).sub_(START_HALF_WIDTH)

    def check_actions(self, actions: Any, shape: tuple[int, ...]) -> torch.Tensor:
        """``actions`` as a float32 tensor on the device, if of ``shape``, finite and in ``[-1, 1]`` (±ACTION_TOL).

        Raises:
            ValueError: naming the wrong shape, or the first non-finite or out-of-bounds value.
        """
        a = torch.as_tensor(actions)
        if tuple(a.shape) != shape:
            raise ValueError(f"{self.name}: actions must have shape {shape}, got {tuple(a.shape)}")
        a = a.to(self.device, torch.float32)
        if not bool((a.abs() <= 1 + ACTION_TOL).all()):  # NaN fails this test too
            bad, what = ~a.isfinite(), "be finite"
            if not bool(bad.any()):
                bad, what = a.abs() > 1 + ACTION_TOL, "lie in [-1, 1]"
            index = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{self.name}: actions must {what}, got {a[index].item()} at index {index}")
        return a

    def move(self, pos: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Next positions ``[n, dim]`` (a new tensor) from positions and actions ``[n, dim]``."""
        new = torch.add(pos, actions.clamp(-1.0, 1.0), alpha=STEP_SCALE)
        # The integer cast truncates toward zero (torch.trunc), as the original's int(p).
        cells = (new.to(torch.int64) + self.offset).clamp_(0, self.size - 1)
        blocked = self.wall[(cells * self.strides).sum(-1)]
        return torch.where(blocked.unsqueeze(-1), pos, new)


def cell_centre(cells: np.ndarray, offset: int) -> np.ndarray:
    """The position at the centre of cells (any shape of indices along one axis, ``int(p) + offset``).

    Truncation toward zero makes the centre cell span ``(-1, 1)`` (centre 0) and every other cell one
    unit, ``[k, k + 1)`` above it and ``(k - 1, k]`` below it (``k = cell - offset``).
    """
    k = np.asarray(cells, dtype=np.float64) - offset
    return k + 0.5 * np.sign(k)


def free_cell_centres(name: str) -> np.ndarray:
    """``[n_free, dim]`` the centre of every free cell of maze ``name`` (its evaluation goals), in index order."""
    cells = np.argwhere(~maze_wall(name))
    return cell_centre(cells, MAZES[name][1]).astype(np.float32)


def eval_goals(name: str) -> EvalGoals:
    """The evaluation goals of maze ``name``: every free cell's centre."""
    return EvalGoals(torch.from_numpy(free_cell_centres(name)))


def _spaces(name: str) -> tuple[spaces.Box, spaces.Box]:
    dim, _, low, high, _ = MAZES[name]
    obs = spaces.Box(low, high, shape=(dim,), dtype=np.float32)
    return obs, spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)


class PointMazeEnv(gymnasium.Env):
    """One point agent (SPEC §6); build it with :func:`gymnasium.make`, whose ``TimeLimit`` sets the horizon.

    Args:
        maze: a name of :data:`MAZES`.
        device: torch device of the state.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, maze: str, device: torch.device | str = "cpu") -> None:
        self.dynamics = MazeDynamics(maze, device)
        self.observation_space, self.action_space = _spaces(maze)
        self._generator = torch.Generator(device=self.dynamics.device)
        self._generator.seed()
        self._pos: torch.Tensor | None = None  # [1, dim], the batched kernel's layout

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._generator.manual_seed(seed)
        self._pos = self.dynamics.starts(1, self._generator)
        return self._pos[0].cpu().numpy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._pos is None:
            raise RuntimeError("call reset() before step()")
        a = self.dynamics.check_actions(action, (self.dynamics.dim,))
        self._pos = self.dynamics.move(self._pos, a.unsqueeze(0))
        return self._pos[0].cpu().numpy(), 0.0, False, False, {}


class PointMazeVectorEnv(VectorEnv):
    """``num_envs`` point agents in one maze, stepped together as tensors ``[num_envs, dim]`` (SPEC §6).

    Autoreset modes as :class:`~sun_lightning.envs.gridworlds.GridworldVectorEnv` has them: ``SAME_STEP``
    (the default; ended sub-environments return their reset observation, the last one in
    ``info["final_obs"]``) or ``DISABLED`` (what the trainer uses; ended sub-environments must be reset
    with ``reset(options={"reset_mask": mask})`` before the next step). One torch generator, seeded by
    :meth:`reset`, draws the starts; every (partial) reset draws starts for all sub-environments and
    keeps the masked ones, so both modes draw alike. The state tensor is replaced, never written in
    place, so the (zero-copy on CPU) observation arrays handed out stay valid.

    Args:
        maze: a name of :data:`MAZES`.
        num_envs: number of sub-environments.
        max_episode_steps: horizon (100 when ``None``).
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an ``AutoresetMode`` or its value).
        device: torch device of the state.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, maze: str, num_envs: int = 1, max_episode_steps: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
                 device: torch.device | str = "cpu") -> None:
        mode = torchrl_autoreset_mode(autoreset_mode)
        self.autoreset_mode = mode  # TorchRL's GymWrapper reads this attribute, not metadata
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.dynamics = MazeDynamics(maze, device)
        self.num_envs = num_envs
        self.horizon = HORIZON if max_episode_steps is None else max_episode_steps
        self.single_observation_space, self.single_action_space = _spaces(maze)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._generator = torch.Generator(device=self.dynamics.device)
        self._generator.seed()
        self._pos: torch.Tensor | None = None
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._ended = np.zeros(num_envs, dtype=bool)  # DISABLED mode: episodes over, awaiting their reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Reset every sub-environment, or only those of ``options["reset_mask"]`` (``[num_envs]`` bool).

        Returns the observations of all sub-environments (the others' unchanged). A ``seed`` reseeds the
        one generator of all sub-environments, with a mask too.
        """
        if seed is not None:
            self._generator.manual_seed(seed)
        mask = reset_mask(options, self.num_envs)
        if mask is None or self._pos is None:
            mask = np.ones(self.num_envs, dtype=bool)
        self._restart(mask)
        return self._pos.cpu().numpy(), {}

    def _restart(self, mask: np.ndarray) -> None:
        starts = self.dynamics.starts(self.num_envs, self._generator)
        if self._pos is not None and not mask.all():
            starts = torch.where(torch.from_numpy(mask).to(starts.device).unsqueeze(-1), starts, self._pos)
        self._pos = starts
        self._elapsed[mask] = 0
        self._ended[mask] = False

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._pos is None:
            raise RuntimeError("call reset() before step()")
        refuse_ended(self._ended)
        a = self.dynamics.check_actions(actions, (self.num_envs, self.dynamics.dim))
        self._pos = self.dynamics.move(self._pos, a)
        self._elapsed += 1
        truncated = self._elapsed >= self.horizon
        terminated = np.zeros(self.num_envs, dtype=bool)
        obs = self._pos.cpu().numpy()
        obs, infos = end_step(self, obs, truncated, lambda: self._pos.cpu().numpy())
        return obs, np.zeros(self.num_envs), terminated, truncated, infos


def _register_all() -> None:
    """Register both mazes and their goal spaces: g_s = p, reached within distance 0.5 (SPEC §2, §6)."""
    module = "sun_lightning.envs.point_maze"  # not __name__, which is "__main__" under ``python -m``
    for name, (dim, _, low, high, rho) in MAZES.items():
        register(
            f"sun_lightning/{name}-v0",
            GoalSpace(obs_dim=dim, num_actions=0, action_dim=dim, goal_dims=tuple(range(dim)),
                      low=(low,) * dim, high=(high,) * dim, rho=rho, reach="distance", eta=0.5),
            entry_point=f"{module}:PointMazeEnv",
            vector_entry_point=f"{module}:PointMazeVectorEnv",
            max_episode_steps=HORIZON,
            kwargs={"maze": name},
        )
        register_eval_goals(f"sun_lightning/{name}-v0", functools.partial(eval_goals, name))


_register_all()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the PointMaze-H data file from DISCOVER's layout pickle.")
    parser.add_argument("--write-h", metavar="PKL", required=True,
                        help=f"maze_layouts/rand_4d_5h.pkl of DISCOVER's code; (re)writes data/{H_FILE}")
    args = parser.parse_args(argv)
    path = h_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_h(read_discover_layout(args.write_h)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
