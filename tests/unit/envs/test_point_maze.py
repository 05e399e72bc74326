"""Point mazes of SPEC §6: maps and their fingerprints, the PointMaze-H data file, dynamics, autoreset, seeding and TorchRL wrapping.

The dynamics are checked against a plain-Python reference written here from the SPEC §6 text (its own
copy of the PointMaze-S map, nested lists, one agent at a time), not against the module's kernel.
"""

import itertools
from collections import deque

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tests.helpers import assert_disabled_draws_as_same_step, assert_single_env_follows

from sun_lightning.envs import goal_space
from sun_lightning.envs.point_maze import (
    HORIZON, STEP_SCALE, MazeDynamics, PointMazeVectorEnv, format_h, h_path, maze_wall, parse_h, read_discover_layout,
)

S_ROWS = [
    "#######################",
    "##.####################",
    *["##.##################.#"] * 4,
    *["##.#########.########.#"] * 2,
    "#............########.#",
    *["#####.#####..########.#"] * 2,
    "#####.................#",
    *["#####################.#"] * 10,
    "#######################",
]
OFFSET = {"PointMazeS": 11, "PointMazeH": 6}
DIM = {"PointMazeS": 2, "PointMazeH": 4}
NAMES = ["PointMazeS", "PointMazeH"]
#: The most corridor steps a diagonal move saves in PointMaze-H: the original's step tests only the destination
#: cell too, so its loops and corners allow the same cuts.
CORNER_CUT_H = 14


def bfs(free: np.ndarray, start: tuple[int, ...]) -> dict[tuple[int, ...], int]:
    """Corridor distance (axis moves between free cells) from ``start`` to every reachable free cell."""
    dist, queue = {start: 0}, deque([start])
    while queue:
        cell = queue.popleft()
        for axis, step in itertools.product(range(free.ndim), (1, -1)):
            nxt = cell[:axis] + (cell[axis] + step,) + cell[axis + 1:]
            if 0 <= nxt[axis] < free.shape[axis] and free[nxt] and nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def max_corner_cut(free: np.ndarray, dist: dict) -> int:
    """Largest corridor-distance gap between two king-adjacent free cells: what cutting a corner can save."""
    worst = 0
    for cell in dist:
        for offset in itertools.product((-1, 0, 1), repeat=free.ndim):
            other = tuple(c + o for c, o in zip(cell, offset))
            if free[other]:
                worst = max(worst, abs(dist[other] - dist[cell]))
    return worst


def cells_of(pos: np.ndarray, name: str) -> np.ndarray:
    return np.trunc(pos).astype(np.int64) + OFFSET[name]


def free_at(pos: np.ndarray, name: str) -> np.ndarray:
    """Whether each position ``[..., d]`` lies in a free cell (outside the grid: wall)."""
    free = ~maze_wall(name)
    cells = cells_of(pos, name)
    inside = ((cells >= 0) & (cells < free.shape[0])).all(-1)
    return inside & free[tuple(np.moveaxis(np.clip(cells, 0, free.shape[0] - 1), -1, 0))]


def positions_in_free_cells(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, d]`` float32 points uniform inside uniformly drawn free cells (cell k holds int(p) = k - offset)."""
    free_cells = np.argwhere(~maze_wall(name))
    j = free_cells[rng.integers(len(free_cells), size=n)] - OFFSET[name]
    u = rng.uniform(0.01, 0.99, size=j.shape)
    p = np.where(j == 0, 2 * u - 1, j + np.sign(j) * u)
    return p.astype(np.float32)


def reference_step(grid: list, name: str, p: list, a: list) -> list:
    """One agent, one step, SPEC §6 in plain Python (float32 arithmetic as the original)."""
    new = [np.float32(pi + np.float32(0.5) * np.float32(min(max(float(ai), -1.0), 1.0))) for pi, ai in zip(p, a)]
    cells = [int(x) + OFFSET[name] for x in new]
    if any(not 0 <= c < len(grid) for c in cells):
        return p
    row = grid
    for c in cells:
        row = row[c]
    return p if row else new


# --- maps -----------------------------------------------------------------------------


def test_s_map_matches_spec():
    free = np.array([[c == "." for c in row] for row in S_ROWS])
    assert free.shape == (23, 23)
    np.testing.assert_array_equal(~maze_wall("PointMazeS"), free)
    assert free.sum() == 63
    dist = bfs(free, (11, 11))
    assert len(dist) == 63  # connected
    assert dist[(21, 21)] == 20 and max(dist.values()) == 20  # the far end is the farthest cell
    assert max_corner_cut(free, dist) == 2  # diagonal moves only round corners


def test_h_is_the_papers_maze():
    """The fingerprint of DISCOVER's rand_4d_5h layout, the maze the paper's GCRL runs used (SPEC §6)."""
    wall = maze_wall("PointMazeH")
    free = ~wall
    assert wall.shape == (13,) * 4
    border = np.ones_like(wall)
    border[(slice(1, -1),) * 4] = False
    assert wall[border].all()
    assert free.sum() == 2594
    start = (6, 6, 6, 6)
    assert free[start]
    dist = bfs(free, start)
    assert len(dist) == 2594  # every free cell reachable from the start
    assert max(dist.values()) == 21  # the farthest cell, corridor steps from the start
    degree = sum(np.roll(free, s, axis) for axis in range(4) for s in (1, -1))
    assert ((degree == 1) & free).sum() == 34  # dead ends
    edges = sum(int((free & np.roll(free, 1, axis)).sum()) for axis in range(4))
    assert edges - free.sum() + 1 == 1325  # independent loops of the corridor graph (a tree has none)
    assert max_corner_cut(free, dist) == CORNER_CUT_H


def test_h_file_round_trips_and_names_its_source():
    text = h_path().read_text()
    assert "rand_4d_5h.pkl" in text and "LeanderDiazBone/discover" in text
    assert format_h(parse_h(text)) == text


def test_discover_layout_reader(tmp_path):
    import pickle

    walls = np.ones((13,) * 4)
    walls[(slice(1, -1),) * 4] = 0.0
    path = tmp_path / "layout.pkl"
    path.write_bytes(pickle.dumps({"walls": walls, "n_dim": 4, "radius": 5}))
    np.testing.assert_array_equal(read_discover_layout(path), walls != 0)
    path.write_bytes(pickle.dumps({"walls": walls[:5], "n_dim": 4, "radius": 5}))
    with pytest.raises(ValueError, match="not a 13\\^4 layout"):
        read_discover_layout(path)
    path.write_bytes(pickle.dumps({"walls": walls, "n_dim": 4, "radius": 5, "x": itertools.count}))
    with pytest.raises(ValueError, match="numpy arrays only, found itertools.count"):
        read_discover_layout(path)


def test_unknown_maze_lists_known():
    with pytest.raises(ValueError, match="unknown maze 'Nope'; known mazes: PointMazeS, PointMazeH"):
        maze_wall("Nope")
    with pytest.raises(ValueError, match="known mazes"):
        PointMazeVectorEnv("Nope")


# --- dynamics -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_never_enters_or_crosses_a_wall(name):
    rng = np.random.default_rng(0)
    dyn = MazeDynamics(name)
    pos = positions_in_free_cells(name, 1024, rng)
    moved = stayed = 0
    for _ in range(300):
        # Half the agents push with full-magnitude actions, to hit walls often.
        a = rng.uniform(-1, 1, size=pos.shape).astype(np.float32)
        a[: len(a) // 2] = np.sign(a[: len(a) // 2])
        new = dyn.move(torch.from_numpy(pos), torch.from_numpy(a)).numpy()
        target = pos + np.float32(0.5) * a
        same = (new == pos).all(-1)
        assert ((new == target).all(-1) | same).all()  # either the move or no move
        assert (same == ~free_at(target, name)).all()  # stays exactly when the target cell is a wall
        assert free_at(new, name).all()
        step = np.abs(cells_of(new, name) - cells_of(pos, name))
        assert step.max() <= 1  # at most a king move between cells
        axis_move = step.sum(-1) == 1  # a cell change along one axis: the segment stays in free cells
        for t in np.linspace(0, 1, 9):
            assert free_at(pos[axis_move] + t * (new[axis_move] - pos[axis_move]), name).all()
        moved, stayed = moved + int((~same).sum()), stayed + int(same.sum())
        pos = new
    assert moved > 0 and stayed > 0


@pytest.mark.parametrize("name", NAMES)
def test_batched_env_equals_one_agent_reference(name):
    # Nested lists, True for walls: S from this file's copy of the map, H from the shipped file.
    grid = [[c == "#" for c in row] for row in S_ROWS] if name == "PointMazeS" else maze_wall(name).tolist()
    rng = np.random.default_rng(1)
    env = PointMazeVectorEnv(name, num_envs=8, max_episode_steps=10**6)
    obs, _ = env.reset(seed=0)
    ref = [list(p) for p in obs]
    # Also from spread-out starts through the kernel alone, to visit the whole maze.
    dyn, spread = MazeDynamics(name), positions_in_free_cells(name, 64, rng)
    spread_ref = [list(p) for p in spread]
    for _ in range(200):
        a = rng.uniform(-1, 1, size=(8, DIM[name])).astype(np.float32)
        a[0] = 1.0
        obs = env.step(a)[0]
        ref = [reference_step(grid, name, p, ai) for p, ai in zip(ref, a)]
        np.testing.assert_array_equal(obs, np.array(ref, dtype=np.float32))
        b = rng.choice(np.float32([-1, -0.5, 0, 0.3, 1]), size=spread.shape)
        spread = dyn.move(torch.from_numpy(spread), torch.from_numpy(b)).numpy()
        spread_ref = [reference_step(grid, name, p, bi) for p, bi in zip(spread_ref, b)]
        np.testing.assert_array_equal(spread, np.array(spread_ref, dtype=np.float32))


def test_starts_are_uniform_near_origin():
    obs, _ = PointMazeVectorEnv("PointMazeH", num_envs=4096).reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (4096, 4)
    assert np.abs(obs).max() <= 0.1 and np.abs(obs.mean(0)).max() < 0.005 and obs.std() > 0.05


# --- autoreset and seeding -------------------------------------------------------------


def test_same_step_autoreset_keeps_final_observation():
    env = gymnasium.make_vec("sun_lightning/PointMazeS-v0", num_envs=3, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    for t in range(1, HORIZON + 1):
        obs, reward, terminated, truncated, info = env.step(np.tile([[0.0, 1.0]], (3, 1)))
        assert not terminated.any() and (reward == 0).all()
        assert truncated.all() == (t == HORIZON) and truncated.any() == (t == HORIZON)
    assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
    final = np.stack(list(info["final_obs"]))
    # Right along row 11 until the wall beyond column 21: p_1 in [10, 11).
    assert (final[:, 1] >= 10).all() and (final[:, 1] < 11).all()
    assert np.abs(obs).max() <= 0.1  # the reset observation


def test_disabled_autoreset_partial_resets():
    env = gymnasium.make_vec("sun_lightning/PointMazeS-v0", num_envs=3, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    assert env.autoreset_mode == env.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    env.reset(seed=1)
    for _ in range(HORIZON):
        obs, _, _, truncated, info = env.step(np.tile([[0.0, 1.0]], (3, 1)))
    assert truncated.all() and info == {} and (obs[:, 1] >= 10).all()  # the true last observation
    with pytest.raises(RuntimeError, match=r"sub-environments \[0, 1, 2\] ended"):
        env.step(np.zeros((3, 2), dtype=np.float32))
    new, _ = env.reset(options={"reset_mask": np.array([True, False, True])})
    assert np.abs(new[[0, 2]]).max() <= 0.1 and (new[1] == obs[1]).all()
    with pytest.raises(RuntimeError, match=r"sub-environments \[1\] ended"):
        env.step(np.zeros((3, 2), dtype=np.float32))
    env.reset(options={"reset_mask": np.array([False, True, False])})
    assert not env.step(np.zeros((3, 2), dtype=np.float32))[3].any()
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    with pytest.raises(ValueError, match="SAME_STEP or DISABLED"):
        PointMazeVectorEnv("PointMazeS", autoreset_mode=AutoresetMode.NEXT_STEP)


def test_disabled_draws_as_same_step():
    same = PointMazeVectorEnv("PointMazeH", num_envs=4, max_episode_steps=7)
    disabled = PointMazeVectorEnv("PointMazeH", num_envs=4, max_episode_steps=7, autoreset_mode="Disabled")
    assert assert_disabled_draws_as_same_step(same, disabled, np.random.default_rng(0).uniform(-1, 1, size=(30, 4, 4)).astype(np.float32)) > 0


def test_seeding_reproducibility_and_single_env():
    def trajectory(seed, num_envs=8):
        env = PointMazeVectorEnv("PointMazeH", num_envs=num_envs, max_episode_steps=50)
        frames = [env.reset(seed=seed)[0]]
        for a in np.random.default_rng(0).uniform(-1, 1, size=(120, num_envs, 4)).astype(np.float32):
            frames.append(env.step(a)[0])
        return np.stack(frames)

    first = trajectory(11)
    np.testing.assert_array_equal(first, trajectory(11))
    assert not np.array_equal(first[0], trajectory(12)[0])
    # The single env steps through the same kernel and draws its start alike.
    single = gymnasium.make("sun_lightning/PointMazeH-v0")
    one = trajectory(5, num_envs=1)
    assert_single_env_follows(single, one[:, 0], np.random.default_rng(0).uniform(-1, 1, size=(40, 1, 4)).astype(np.float32)[:, 0], seed=5)


def test_single_env_truncates_at_horizon():
    env = gymnasium.make("sun_lightning/PointMazeS-v0")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    for t in range(1, HORIZON + 1):
        truncated = env.step(env.action_space.sample())[3]
        assert truncated == (t == HORIZON)


# --- registration, bad input, TorchRL ---------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_goal_space(name):
    space, d = goal_space(f"sun_lightning/{name}-v0"), DIM[name]
    assert (space.obs_dim, space.action_dim, space.num_actions, space.goal_dim) == (d, d, 0, d)
    assert (space.reach, space.eta) == ("distance", 0.5) and not space.discrete
    low, high, rho = (-11.0, 12.0, 0.1) if name == "PointMazeS" else (-6.0, 7.0, 0.5)
    assert space.low == (low,) * d and space.high == (high,) * d and space.rho == rho


def test_bad_actions_raise():
    env = PointMazeVectorEnv("PointMazeS", num_envs=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"PointMazeS: actions must have shape \(2, 2\), got \(2, 3\)"):
        env.step(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"actions must be finite, got nan at index \(1, 0\)"):
        env.step(np.array([[0, 0], [np.nan, 0]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"actions must lie in \[-1, 1\], got -1.5 at index \(0, 1\)"):
        env.step(np.array([[0, -1.5], [0, 0]], dtype=np.float32))
    obs = env.step(np.array([[1 + 1e-7, 0], [0, -1]]))[0]  # rounding noise is clipped, float64 accepted
    single = gymnasium.make("sun_lightning/PointMazeH-v0")
    single.reset(seed=0)
    with pytest.raises(ValueError, match=r"PointMazeH: actions must have shape \(4,\), got \(2,\)"):
        single.step(np.zeros(2, dtype=np.float32))
    assert obs.shape == (2, 2)


@pytest.mark.parametrize("name", NAMES)
def test_torchrl_gym_wrapper_disabled_rollout_with_partial_resets(name):
    from torchrl.envs import GymWrapper

    vec = gymnasium.make_vec(f"sun_lightning/{name}-v0", num_envs=4, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    env = GymWrapper(vec)
    env.set_seed(0)
    first = env.rollout(30, break_when_any_done=False)
    # Restart env 0 alone, so its episodes end 30 steps out of phase: partial resets from then on.
    td = first[:, -1]["next"].clone()
    td = env.reset(td.update({"_reset": torch.tensor([[True], [False], [False], [False]])}))
    rollout = env.rollout(300, auto_reset=False, tensordict=td, break_when_any_done=False)
    done = rollout["next", "done"].squeeze(-1)
    assert done[0].nonzero().flatten().tolist() == [99, 199, 299]
    assert done[1].nonzero().flatten().tolist() == [69, 169, 269]
    assert not rollout["next", "terminated"].any() and (rollout["next", "reward"] == 0).all()
    nxt, obs = rollout["next", "observation"].numpy(), rollout["observation"].numpy()
    assert free_at(nxt, name).all() and free_at(obs, name).all()
    assert np.abs(obs[1, 70]).max() <= 0.1  # reset after the episode end
    assert np.abs(obs[0, 1:100] - nxt[0, :99]).max() == 0  # one env's chain of steps is unbroken
    assert np.abs(nxt - obs).max() <= STEP_SCALE * (1 + 1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_kernel_equals_cpu(name):
    rng = np.random.default_rng(0)
    pos = torch.from_numpy(positions_in_free_cells(name, 4096, rng))
    cpu, gpu = MazeDynamics(name), MazeDynamics(name, "cuda")
    pos_gpu = pos.cuda()
    for _ in range(50):
        a = torch.from_numpy(rng.uniform(-1, 1, size=pos.shape).astype(np.float32))
        pos, pos_gpu = cpu.move(pos, a), gpu.move(pos_gpu, gpu.check_actions(a, tuple(a.shape)))
        torch.testing.assert_close(pos_gpu.cpu(), pos, rtol=0, atol=0)
    env = PointMazeVectorEnv(name, num_envs=16, device="cuda")
    obs = env.reset(seed=0)[0]
    assert env.step(np.zeros((16, DIM[name]), dtype=np.float32))[0].shape == obs.shape
