"""The MuJoCo ant mazes AntMaze-S (7 × 7) and AntMaze-H (11 × 11) of SPEC §6, as batched vector envs.

The body is gymnasium's MuJoCo ant (its ``ant.xml`` asset), loaded into a :class:`mujoco.MjSpec` that adds
one box per wall cell of the SPEC §6 map: cell size 5, wall height 5, cell ``(i, j)`` centred at
``(5i - c, 5j - c)`` with ``c = 5 (n - 1) / 2``, so the maze is centred on the origin and the ant's start,
the centre cell, is at ``(0, 0)``. Row ``i`` of a map is the x cell, column ``j`` the y cell. The model is
compiled once per maze (:func:`maze_model`) and every world of a vector env runs a copy of it.

Details follow the baselines' code, which the paper ran (SPEC §6):

* Collisions: only the feet collide with the walls. Gymnasium's ant has no separate foot geom: each leg
  ends in its lower-leg ("ankle") capsule, whose tip is the foot, so those four capsules get the wall
  collision bit (:data:`WALL_BIT`) and the torso, hips and upper legs pass through walls. The torso
  sphere may therefore overlap a wall, where the legs straddle a wall corner, but the feet keep its
  centre out of the wall cells (under strong outside pushes, less than a torso radius in). Walls do not
  collide with the floor or with each other; the whole body still collides with the floor, as
  gymnasium's ant.
* Time: one env step is 0.05 s, :data:`FRAME_SKIP` = 5 steps of the asset's 0.01 s timestep.
* Integrator: Euler, the default integrator of the baselines' ant XML (gymnasium's asset asks for RK4),
  and several times cheaper than RK4 per step. MuJoCo's Euler integrates joint damping implicitly, and
  the gait stays stable under random actions (``tests/unit/envs/test_ant_maze.py``: no NaN, no divergence warning,
  bounded velocities, the torso centre never a radius deep into a wall cell, even when pushed).
* Height rule: when the torso height (``qpos[2]``) leaves ``[0.2, 2]`` after a step, the world gets its
  state from before the step back, with zero velocities (see :mod:`sun_lightning.envs.mujoco_vec`).
  The baselines restore the previous state as it was; that can freeze an airborne ant for the rest of its
  episode (the restored state fails again whatever the action), which zeroing the velocities prevents.
* Start: the asset's ``init_qpos`` standing pose (torso at height 0.55, every joint inside its range;
  gymnasium's ant starts from ``qpos0`` instead, ankles outside their ranges) at the centre cell, plus the
  noise both gymnasium's ant and the baselines use: ``U(-0.1, 0.1)`` on every ``qpos`` entry and
  ``0.1 · N(0, 1)`` on every ``qvel`` entry, the torso quaternion then renormalized.

Observation: the ant's 29-dim state, ``qpos`` (15: torso x, y, z, quaternion, 8 joint angles) then ``qvel``
(14), float32. Goal projection: torso ``(x, y)``, obs dims ``(0, 1)``. Action: the 8 motor controls in
``[-1, 1]`` (the asset's ``ctrlrange``). Rewards are 0, episodes are never terminated, only truncated at
250 (S) or 500 (H) steps.
"""

from __future__ import annotations

import functools
from importlib import resources

import mujoco
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from sun_lightning.envs.eval_goals import EvalGoals, register_eval_goals
from sun_lightning.envs.mujoco_vec import NO_HORIZON, MujocoSingleEnv, MujocoVectorEnv
from sun_lightning.envs.registry import GoalSpace, register

WALL, FREE = "#", "."
CELL_SIZE = 5.0
WALL_HEIGHT = 5.0
FRAME_SKIP = 5  # x the asset's 0.01 s timestep = 0.05 s per env step
TIMESTEP = 0.01
INTEGRATOR = mujoco.mjtIntegrator.mjINT_EULER
HEALTHY_Z = (0.2, 2.0)  # torso height range; a step that leaves it is undone
RESET_NOISE = 0.1  # qpos + U(-0.1, 0.1), qvel ~ 0.1 N(0, 1)
FOOT_GEOMS = ("left_ankle_geom", "right_ankle_geom", "third_ankle_geom", "fourth_ankle_geom")
WALL_BIT = 2  # contype/conaffinity bit shared by the walls and the feet only (bit 1: the asset's floor contacts)
OBS_DIM, ACTION_DIM = 29, 8
WALL_RGBA = (0.7, 0.5, 0.3, 1.0)

# SPEC §6 maps; row i = x cell, column j = y cell.
MAPS: dict[str, tuple[str, ...]] = {
    "AntMazeS": (
        "#######",
        "#.....#",
        "#.#.#.#",
        "#.....#",
        "#.#.#.#",
        "#.....#",
        "#######",
    ),
    "AntMazeH": (
        "###########",
        "#.....#...#",
        "#.#...#.#.#",
        "#..#......#",
        "#.....#.###",
        "#.........#",
        "#.........#",
        "#..#...#..#",
        "#.#.....#.#",
        "#.........#",
        "###########",
    ),
}
# name -> (horizon, goal/metric bound), SPEC §6
MAZES: dict[str, tuple[int, float]] = {"AntMazeS": (250, 17.5), "AntMazeH": (500, 27.5)}


def ant_xml_path() -> str:
    """Path of gymnasium's MuJoCo ant asset."""
    return str(resources.files("gymnasium.envs.mujoco") / "assets" / "ant.xml")


@functools.cache
def maze_wall(name: str) -> np.ndarray:
    """The read-only ``[n, n]`` wall grid (bool) of maze ``name``, checked: square, walled border, free centre."""
    if name not in MAPS:
        raise ValueError(f"unknown maze {name!r}; known mazes: {', '.join(MAPS)}")
    wall = np.array([[c == WALL for c in row] for row in MAPS[name]])
    n = wall.shape[0]
    if wall.shape != (n, n) or n % 2 == 0:
        raise ValueError(f"{name}: the map must be square with an odd side, got {wall.shape}")
    border = np.ones_like(wall)
    border[1:-1, 1:-1] = False
    if not wall[border].all() or wall[n // 2, n // 2]:
        raise ValueError(f"{name}: the border must be walls and the centre cell free")
    wall.setflags(write=False)
    return wall


def cell_centres(name: str) -> np.ndarray:
    """``[n, n, 2]`` world (x, y) of every cell centre, ``(5i - c, 5j - c)``: the maze is centred on the origin."""
    n = maze_wall(name).shape[0]
    coords = CELL_SIZE * np.arange(n) - CELL_SIZE * (n - 1) / 2
    return np.stack(np.meshgrid(coords, coords, indexing="ij"), axis=-1)


def eval_goals(name: str) -> EvalGoals:
    """The evaluation goals of maze ``name``: every free cell's centre, torso (x, y)."""
    centres = cell_centres(name)[~maze_wall(name)]
    return EvalGoals(torch.tensor(centres, dtype=torch.float32))


def maze_spec(name: str) -> mujoco.MjSpec:
    """Gymnasium's ant plus one wall box per wall cell of maze ``name``, with the collision filter and options."""
    spec = mujoco.MjSpec.from_file(ant_xml_path())
    spec.modelname = name
    spec.option.integrator = INTEGRATOR
    spec.option.timestep = TIMESTEP
    for geom in spec.geoms:
        if geom.name in FOOT_GEOMS:
            geom.contype |= WALL_BIT
    centres, half = cell_centres(name), CELL_SIZE / 2
    for i, j in np.argwhere(maze_wall(name)):
        x, y = centres[i, j]
        spec.worldbody.add_geom(
            name=f"wall_{i}_{j}", type=mujoco.mjtGeom.mjGEOM_BOX, pos=[x, y, WALL_HEIGHT / 2],
            size=[half, half, WALL_HEIGHT / 2], contype=0, conaffinity=WALL_BIT, rgba=list(WALL_RGBA),
        )
    return spec


@functools.cache
def maze_model(name: str) -> mujoco.MjModel:
    """The compiled model of maze ``name``, built once; vector envs hand copies of it to their worlds."""
    model = maze_spec(name).compile()
    missing = [g for g in FOOT_GEOMS if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) < 0]
    if missing or model.nq != 15 or model.nv != 14 or model.nu != ACTION_DIM:
        raise ValueError(f"gymnasium's ant asset changed: nq={model.nq}, nv={model.nv}, nu={model.nu}, "
                         f"missing foot geoms {missing}")
    return model


def init_qpos(model: mujoco.MjModel) -> np.ndarray:
    """The asset's standing pose ``init_qpos`` (its custom numeric), torso over the origin."""
    return model.numeric("init_qpos").data.astype(np.float64)


def _spaces() -> tuple[spaces.Box, spaces.Box]:
    obs = spaces.Box(-np.inf, np.inf, shape=(OBS_DIM,), dtype=np.float32)
    return obs, spaces.Box(-1.0, 1.0, shape=(ACTION_DIM,), dtype=np.float32)


class AntMazeVectorEnv(MujocoVectorEnv):
    """``num_envs`` ants in one maze, stepped in one threaded :class:`mujoco.batch.Batch` call (SPEC §6).

    Args:
        maze: ``"AntMazeS"`` or ``"AntMazeH"``.
        num_envs: number of worlds.
        max_episode_steps: horizon (250 for S, 500 for H when ``None``).
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an ``AutoresetMode`` or its value).
        num_threads: threads of the batch; ``None`` for ``min(num_envs, available CPUs)``.
    """

    def __init__(self, maze: str, num_envs: int = 1, max_episode_steps: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
                 num_threads: int | None = None) -> None:
        maze_wall(maze)  # the clear error for an unknown name
        model = maze_model(maze)
        obs_space, action_space = _spaces()
        super().__init__(model, name=maze, single_observation_space=obs_space, single_action_space=action_space,
                         horizon=MAZES[maze][0], frame_skip=FRAME_SKIP, num_envs=num_envs,
                         max_episode_steps=max_episode_steps, autoreset_mode=autoreset_mode,
                         num_threads=num_threads)
        self.maze = maze
        self._init_qpos = init_qpos(model)  # centre cell = origin: no offset to add

    def sample_state(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        qpos = self._init_qpos + rng.uniform(-RESET_NOISE, RESET_NOISE, size=(n, self.model.nq))
        qpos[:, 3:7] /= np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)  # the free joint's quaternion
        qvel = RESET_NOISE * rng.standard_normal((n, self.model.nv))
        return {"qpos": qpos, "qvel": qvel}

    def invalid(self) -> np.ndarray:
        z = self.qpos[:, 2]
        return (z < HEALTHY_Z[0]) | (z > HEALTHY_Z[1])


class AntMazeEnv(MujocoSingleEnv):
    """One ant (SPEC §6); build it with :func:`gymnasium.make`, whose ``TimeLimit`` sets the horizon.

    Args:
        maze: ``"AntMazeS"`` or ``"AntMazeH"``.
    """

    def __init__(self, maze: str) -> None:
        super().__init__(AntMazeVectorEnv(maze, num_envs=1, max_episode_steps=NO_HORIZON,
                                          autoreset_mode=AutoresetMode.DISABLED, num_threads=1))


def _register_all() -> None:
    """Register both mazes with their goal spaces: g_s = torso (x, y), reached within distance 0.5 (SPEC §2, §6)."""
    module = "sun_lightning.envs.ant_maze"
    for name, (horizon, bound) in MAZES.items():
        register(
            f"sun_lightning/{name}-v0",
            GoalSpace(obs_dim=OBS_DIM, num_actions=0, action_dim=ACTION_DIM, goal_dims=(0, 1),
                      low=(-bound, -bound), high=(bound, bound), rho=0.1, reach="distance", eta=0.5),
            entry_point=f"{module}:AntMazeEnv",
            vector_entry_point=f"{module}:AntMazeVectorEnv",
            max_episode_steps=horizon,
            kwargs={"maze": name},
        )
        register_eval_goals(f"sun_lightning/{name}-v0", functools.partial(eval_goals, name))


_register_all()
