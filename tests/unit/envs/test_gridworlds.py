"""Gridworlds of SPEC §6: layouts, dynamics, autoreset, seeding and TorchRL wrapping.

The dynamics are checked against an independent reference written here from the
SPEC §6 text (its own copy of the layouts, move deltas and one-way rules), not
against the module's table builder.
"""

from collections import deque

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tests.helpers import assert_disabled_draws_as_same_step

from sun_lightning.envs import goal_space
from sun_lightning.envs.gridworlds import LAYOUTS, GridworldVectorEnv

# --- Independent reference (SPEC §6) -------------------------------------------------

FOUR_ROOM_ASCII = """
W W W W W W W W W W W W W
W S . . . . W . . . . . W
W . . . . . W . . . . . W
W Q Q Q . . . . . . . . W
W W . W W W W W . . . . W
W . . . . . . W . . . . W
W . . . . . . W . . . . W
W . . . . . . W W W . W W
W . . . . . . W . . . . W
W . . . . . . W . . . . W
W . . . . . . . . . . . W
W . . . . . . W . . . G W
W W W W W W W W W W W W W
"""

GRID_MAZE_ASCII = """
. . . . . . . . . . . .
. W . . . . . . . . G .
W . . . . W W W W . W .
. W . . W W . . . . W .
. . . W W . . . . . W .
. . W W . . . . . . W .
. W W . . . . . W W W .
. . W . . . . . . . W .
. . . . . W W W . . W .
W W . . W . . . . . W .
. . W . W . . . . . W .
S . W . . . . . . . . .
"""

DELTAS = {
    "L": (0, -1), "R": (0, 1), "U": (-1, 0), "D": (1, 0),
    "UL": (-1, -1), "UR": (-1, 1), "DL": (1, -1), "DR": (1, 1), "STAY": (0, 0),
}
ACTIONS_4 = ["L", "R", "U", "D"]
ACTIONS_9 = ["L", "R", "U", "D", "UL", "UR", "DL", "DR", "STAY"]
A = {name: i for i, name in enumerate(ACTIONS_9)}

FOUR_ROOM_ONE_WAY = {(4, 2): "D", (5, 4): "L", (11, 3): "R", (11, 4): "R", (10, 7): "L"}
FOUR_ROOM_ONE_WAY.update({(r, 3): "L" for r in range(5, 11)})
FOUR_ROOM_ONE_WAY.update({(r, 4): "R" for r in range(6, 11)})


def parse(ascii_grid):
    return [line.split() for line in ascii_grid.strip().splitlines()]


def reference_next(grid, r, c, action, one_way=None, same_area=None):
    """Destination of ``action`` on tile (r, c), straight from the SPEC §6 rules."""
    if one_way and (r, c) in one_way and one_way[(r, c)] != action:
        return r, c
    dr, dc = DELTAS[action]
    nr, nc = r + dr, c + dc
    off_grid = nr < 0 or nr >= len(grid) or nc < 0 or nc >= len(grid[0])
    if off_grid or grid[nr][nc] == "W":
        return r, c
    if same_area is not None and not same_area((r, c), (nr, nc)):
        return r, c
    return nr, nc


def reference_table(name):
    if name == "ThreeRoom":
        grid = [["."] * 8 for _ in range(9)]
        return grid, ACTIONS_4, None, lambda p, q: p[0] // 3 == q[0] // 3
    if name == "FourRoomStuck":
        return parse(FOUR_ROOM_ASCII), ACTIONS_4, FOUR_ROOM_ONE_WAY, None
    return parse(GRID_MAZE_ASCII), ACTIONS_9, None, None


def rc(layout, tile):
    return divmod(int(tile), layout.cols)


def reachable(layout, sources, stop_at_terminal=True):
    """Tiles reachable from ``sources`` under any action sequence (BFS over next_tile)."""
    seen, queue = set(sources), deque(sources)
    while queue:
        tile = queue.popleft()
        for a in range(layout.num_actions):
            if stop_at_terminal and layout.terminal[tile, a]:
                continue
            nxt = int(layout.next_tile[tile, a])
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def shortest_actions(layout, start, goal):
    """Action sequence of a shortest path from ``start`` to ``goal`` (BFS)."""
    parent, queue = {start: None}, deque([start])
    while queue:
        tile = queue.popleft()
        for a in range(layout.num_actions):
            nxt = int(layout.next_tile[tile, a])
            if nxt not in parent:
                parent[nxt] = (tile, a)
                queue.append(nxt)
    actions, tile = [], goal
    while parent[tile] is not None:
        tile, a = parent[tile]
        actions.append(a)
    return actions[::-1]


def four_sigma(count, n, p):
    return abs(count - n * p) <= 4 * np.sqrt(n * p * (1 - p))


# --- Layout tables -------------------------------------------------------------------


def test_layout_characters_match_spec():
    assert LAYOUTS["FourRoomStuck"].chars.tolist() == parse(FOUR_ROOM_ASCII)
    assert LAYOUTS["GridMaze"].chars.tolist() == parse(GRID_MAZE_ASCII)
    three = LAYOUTS["ThreeRoom"]
    assert (three.rows, three.cols) == (9, 8) and not three.wall.any()


@pytest.mark.parametrize("name", ["ThreeRoom", "FourRoomStuck", "GridMaze"])
def test_transition_table_matches_reference(name):
    layout = LAYOUTS[name]
    grid, actions, one_way, same_area = reference_table(name)
    assert layout.num_actions == len(actions)
    expected = np.empty_like(layout.next_tile)
    for r in range(layout.rows):
        for c in range(layout.cols):
            for a, action in enumerate(actions):
                if grid[r][c] == "W":
                    nr, nc = r, c  # walls are never occupied: they map to themselves
                else:
                    nr, nc = reference_next(grid, r, c, action, one_way, same_area)
                expected[r * layout.cols + c, a] = nr * layout.cols + nc
    np.testing.assert_array_equal(layout.next_tile, expected)


def test_random_terminal_and_start_tables():
    four, maze, three = LAYOUTS["FourRoomStuck"], LAYOUTS["GridMaze"], LAYOUTS["ThreeRoom"]
    assert {rc(four, t) for t in np.flatnonzero(four.random_tile)} == {(3, 1), (3, 2), (3, 3)}
    assert not maze.random_tile.any() and not three.random_tile.any()

    goal = four.index(11, 11)
    entering = {(rc(four, s), a) for s, a in zip(*np.nonzero(four.terminal)) if s != goal}
    assert entering == {((10, 11), A["D"]), ((11, 10), A["R"])}
    assert {(rc(maze, s), a) for s, a in zip(*np.nonzero(maze.terminal))} == {((1, 10), A["STAY"])}
    assert not three.terminal.any()

    assert four.start_probs[four.index(1, 1)] == 1.0
    assert maze.start_probs[maze.index(11, 0)] == 1.0
    starts = {rc(three, t): p for t, p in enumerate(three.start_probs) if p > 0}
    assert starts == {(2, 0): 0.475, (3, 0): 0.475, (8, 0): 0.05}


@pytest.mark.parametrize("name", ["ThreeRoom", "FourRoomStuck", "GridMaze"])
def test_goal_space_registration_and_coverable_tiles(name):
    layout = LAYOUTS[name]
    space = goal_space(f"sun_lightning/{name}-v0")
    assert space.obs_dim == layout.rows * layout.cols
    assert space.num_actions == (9 if name == "GridMaze" else 4)
    assert space.goal_dims is None and space.reach == "exact" and space.exact_counts
    assert space.grid_shape == (layout.rows, layout.cols)
    free = {t for t in range(layout.num_tiles) if not layout.wall[t]}
    if name == "FourRoomStuck":
        free.discard(layout.index(11, 11))
    assert set(space.coverable) == free
    # Every coverable tile can actually be visited, so full coverage is attainable.
    starts = [int(t) for t in np.flatnonzero(layout.start_probs)]
    assert free <= reachable(layout, starts)
    assert len(space.coverable) == {"ThreeRoom": 72, "FourRoomStuck": 103, "GridMaze": 108}[name]


# --- FourRoomStuck -------------------------------------------------------------------

FOUR_ROOM_TO_GOAL = [A["R"]] * 4 + [A["D"]] * 2 + [A["R"]] * 5 + [A["D"]] * 8 + [A["R"]]


def test_four_room_bottom_left_room_is_a_trap():
    layout = LAYOUTS["FourRoomStuck"]
    room = {layout.index(r, c) for r in range(5, 12) for c in range(1, 7)}
    # The two doorways can be stepped onto from inside, but only lead back in.
    doorways = {layout.index(4, 2), layout.index(10, 7)}
    for tile in room:
        assert reachable(layout, [tile]) == room | doorways
    assert room <= reachable(layout, [layout.index(1, 1)])


def test_four_room_goal_terminates():
    env = gymnasium.make("sun_lightning/FourRoomStuck-v0")
    obs, _ = env.reset(seed=0)
    assert obs.argmax() == LAYOUTS["FourRoomStuck"].index(1, 1)
    for t, action in enumerate(FOUR_ROOM_TO_GOAL, start=1):
        obs, reward, terminated, truncated, _ = env.step(action)
        assert reward == 0.0 and not truncated
        assert terminated == (t == len(FOUR_ROOM_TO_GOAL))
    assert obs.argmax() == LAYOUTS["FourRoomStuck"].index(11, 11)


def test_q_tile_replaces_half_of_the_actions():
    layout = LAYOUTS["FourRoomStuck"]
    n, rng = 40_000, np.random.default_rng(0)
    tiles = np.full(n, layout.index(3, 2))
    next_tiles, terminated = layout.transition(tiles, np.full(n, A["R"]), rng)
    assert not terminated.any()
    counts = {rc(layout, t): k for t, k in zip(*np.unique(next_tiles, return_counts=True))}
    # Kept with 1/2, else uniform over 4 actions (one of which is "right" again).
    expected = {(3, 3): 0.625, (3, 1): 0.125, (2, 2): 0.125, (4, 2): 0.125}
    assert set(counts) == set(expected)
    for tile, p in expected.items():
        assert four_sigma(counts[tile], n, p), (tile, counts[tile] / n)
    plain, _ = layout.transition(np.full(n, layout.index(1, 2)), np.full(n, A["R"]), rng)
    assert (plain == layout.index(1, 3)).all()


# --- GridMaze ------------------------------------------------------------------------


def test_grid_maze_start_pocket_has_one_exit():
    layout = LAYOUTS["GridMaze"]
    pocket = {layout.index(r, c) for r in (10, 11) for c in (0, 1)}
    exits = {
        (rc(layout, s), a, rc(layout, layout.next_tile[s, a]))
        for s in pocket
        for a in range(9)
        if layout.next_tile[s, a] not in pocket
    }
    assert exits == {((10, 1), A["UR"], (9, 2))}


def test_grid_maze_stay_on_goal_terminates():
    layout = LAYOUTS["GridMaze"]
    goal = layout.index(1, 10)
    path = shortest_actions(layout, layout.index(11, 0), goal)
    env = gymnasium.make("sun_lightning/GridMaze-v0")
    env.reset(seed=0)
    for action in path:
        obs, _, terminated, _, _ = env.step(action)
        assert not terminated
    assert obs.argmax() == goal
    for action in (A["L"], A["R"]):  # leave G and come back: no termination
        obs, _, terminated, _, _ = env.step(action)
        assert not terminated
    assert obs.argmax() == goal
    obs, _, terminated, truncated, _ = env.step(A["STAY"])
    assert terminated and not truncated and obs.argmax() == goal


# --- ThreeRoom -----------------------------------------------------------------------


def test_three_room_rooms_are_disconnected():
    layout = LAYOUTS["ThreeRoom"]
    for first_row, spawn in ((0, (2, 0)), (3, (3, 0)), (6, (8, 0))):
        room = {layout.index(r, c) for r in range(first_row, first_row + 3) for c in range(8)}
        assert reachable(layout, [layout.index(*spawn)]) == room


def test_three_room_spawn_frequencies():
    n = 20_000
    env = GridworldVectorEnv("ThreeRoom", num_envs=n)
    obs, _ = env.reset(seed=3)
    layout = LAYOUTS["ThreeRoom"]
    tiles, counts = np.unique(obs.argmax(-1), return_counts=True)
    spawns = {rc(layout, t): k for t, k in zip(tiles, counts)}
    assert set(spawns) == {(2, 0), (3, 0), (8, 0)}
    for tile, p in {(2, 0): 0.475, (3, 0): 0.475, (8, 0): 0.05}.items():
        assert four_sigma(spawns[tile], n, p), (tile, spawns[tile] / n)


# --- Vector env: horizon, autoreset, equivalence, seeding ------------------------------


def test_make_vec_builds_the_native_vector_env():
    env = gymnasium.make_vec("sun_lightning/FourRoomStuck-v0", num_envs=8, vectorization_mode="vector_entry_point")
    assert isinstance(env, GridworldVectorEnv)
    assert env.num_envs == 8 and env.horizon == 200
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.single_observation_space.shape == (169,) and env.single_observation_space.dtype == np.float32
    assert env.single_action_space.n == 4 and tuple(env.action_space.nvec) == (4,) * 8
    obs, info = env.reset(seed=0)
    assert obs.shape == (8, 169) and info == {}
    assert (obs.sum(-1) == 1).all() and (obs.argmax(-1) == LAYOUTS["FourRoomStuck"].index(1, 1)).all()
    with pytest.raises(ValueError):
        env.step(np.full(8, 4))
    with pytest.raises(ValueError):
        env.step(np.zeros(7, dtype=np.int64))


def test_horizon_truncation_and_final_obs():
    layout = LAYOUTS["ThreeRoom"]
    env = GridworldVectorEnv("ThreeRoom", num_envs=3)
    obs, _ = env.reset(seed=1)
    spawns = obs.argmax(-1)
    for t in range(1, 101):
        obs, reward, terminated, truncated, info = env.step(np.full(3, A["R"]))
        assert not terminated.any() and (reward == 0).all()
        if t < 100:
            assert not truncated.any() and info == {}
    assert truncated.all() and info["_final_obs"].all() and info["_final_info"].all()
    # Moving right 100 times parks every agent on its room's right wall.
    expected_final = [layout.index(rc(layout, s)[0], 7) for s in spawns]
    assert [o.argmax() for o in info["final_obs"]] == expected_final
    assert set(obs.argmax(-1)) <= {layout.index(2, 0), layout.index(3, 0), layout.index(8, 0)}

    single = gymnasium.make("sun_lightning/ThreeRoom-v0")
    single.reset(seed=1)
    flags = [single.step(A["L"])[3] for _ in range(100)]
    assert flags == [False] * 99 + [True]


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_autoreset_modes_match_sync_vector_env(mode):
    ours = gymnasium.make_vec("sun_lightning/FourRoomStuck-v0", num_envs=2, vectorization_mode="vector_entry_point",
                              autoreset_mode=mode)
    sync = SyncVectorEnv([lambda: gymnasium.make("sun_lightning/FourRoomStuck-v0")] * 2, autoreset_mode=mode)
    np.testing.assert_array_equal(ours.reset(seed=0)[0], sync.reset(seed=0)[0])
    goal, start = LAYOUTS["FourRoomStuck"].index(11, 11), LAYOUTS["FourRoomStuck"].index(1, 1)
    # Env 0 walks to G (deterministic path, no Q tile); env 1 keeps bumping the wall.
    for t, action in enumerate(FOUR_ROOM_TO_GOAL + [A["L"]] * 3, start=1):
        actions = np.array([action, A["L"]])
        o1, r1, te1, tr1, i1 = ours.step(actions)
        o2, r2, te2, tr2, i2 = sync.step(actions)
        for x1, x2 in ((o1, o2), (r1, r2), (te1, te2), (tr1, tr2)):
            np.testing.assert_array_equal(x1, x2)
        assert i1.keys() == i2.keys()
        assert te1.tolist() == [t == len(FOUR_ROOM_TO_GOAL), False]
        if not te1.any() or mode is AutoresetMode.DISABLED:
            assert i1 == {}
        if te1.any() and mode is AutoresetMode.SAME_STEP:
            assert i1["_final_obs"].tolist() == [True, False] and i1["_final_info"].tolist() == [True, False]
            assert i1["final_obs"][1] is None and i1["final_obs"][0].argmax() == goal
            np.testing.assert_array_equal(i1["final_obs"][0], i2["final_obs"][0])
            assert i1["final_info"] == i2["final_info"] == {}
            assert o1[0].argmax() == start  # the reset observation, same step
        elif te1.any():
            assert o1[0].argmax() == goal  # the true last observation; the reset is the caller's
            o1, o2 = (env.reset(options={"reset_mask": te1.copy()})[0] for env in (ours, sync))
            np.testing.assert_array_equal(o1, o2)
            assert o1[0].argmax() == start and o1[1].argmax() == start


def test_vector_env_matches_single_envs_on_deterministic_maze():
    n, steps = 4, 250  # past the 200-step horizon, so truncation resets happen too
    vec = GridworldVectorEnv("GridMaze", num_envs=n)
    singles = [gymnasium.make("sun_lightning/GridMaze-v0") for _ in range(n)]
    obs = vec.reset(seed=0)[0]
    for i, env in enumerate(singles):
        np.testing.assert_array_equal(obs[i], env.reset(seed=i)[0])
    actions = np.random.default_rng(0).integers(9, size=(steps, n))
    resets = 0
    for step_actions in actions:
        obs, _, terminated, truncated, info = vec.step(step_actions)
        for i, env in enumerate(singles):
            s_obs, _, s_term, s_trunc, _ = env.step(int(step_actions[i]))
            assert (terminated[i], truncated[i]) == (s_term, s_trunc)
            if s_term or s_trunc:
                resets += 1
                np.testing.assert_array_equal(info["final_obs"][i], s_obs)
                s_obs = env.reset()[0]
            np.testing.assert_array_equal(obs[i], s_obs)
    assert resets >= n


@pytest.mark.parametrize("name", ["ThreeRoom", "FourRoomStuck"])
def test_vector_env_of_one_matches_single_env_with_randomness(name):
    # Same kernel and draw order: spawns and Q tiles agree under one seed.
    vec = GridworldVectorEnv(name, num_envs=1)
    single = gymnasium.make(f"sun_lightning/{name}-v0")
    np.testing.assert_array_equal(vec.reset(seed=5)[0][0], single.reset(seed=5)[0])
    resets, visited = 0, set()
    for action in np.random.default_rng(1).integers(4, size=450):
        obs, _, terminated, truncated, info = vec.step(np.array([action]))
        s_obs, _, s_term, s_trunc, _ = single.step(int(action))
        assert (terminated[0], truncated[0]) == (s_term, s_trunc)
        if s_term or s_trunc:
            resets += 1
            np.testing.assert_array_equal(info["final_obs"][0], s_obs)
            s_obs = single.reset()[0]
        np.testing.assert_array_equal(obs[0], s_obs)
        visited.add(int(s_obs.argmax()))
    assert resets >= 2
    if name == "FourRoomStuck":
        assert visited & {LAYOUTS[name].index(3, c) for c in (1, 2, 3)}  # Q tiles were exercised


def test_disabled_autoreset_partial_resets():
    layout = LAYOUTS["ThreeRoom"]
    env = gymnasium.make_vec("sun_lightning/ThreeRoom-v0", num_envs=3, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    assert env.autoreset_mode == env.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    obs, _ = env.reset(seed=1)
    spawns = obs.argmax(-1)
    for t in range(1, 101):
        obs, reward, terminated, truncated, info = env.step(np.full(3, A["R"]))
        assert not terminated.any() and (reward == 0).all() and info == {}
        assert truncated.all() == (t == 100) and truncated.any() == (t == 100)
    # The step that ends an episode returns its true last observation: moving right 100 times
    # parks every agent on its room's right wall.
    expected_final = [layout.index(rc(layout, s)[0], 7) for s in spawns]
    assert obs.argmax(-1).tolist() == expected_final
    with pytest.raises(RuntimeError, match=r"sub-environments \[0, 1, 2\] ended"):
        env.step(np.zeros(3, dtype=np.int64))
    # Only the masked sub-environments restart; the others keep their observation and stay ended.
    obs, info = env.reset(options={"reset_mask": np.array([True, False, True])})
    assert info == {} and obs[1].argmax() == expected_final[1]
    assert {obs[0].argmax(), obs[2].argmax()} <= {layout.index(2, 0), layout.index(3, 0), layout.index(8, 0)}
    with pytest.raises(RuntimeError, match=r"sub-environments \[1\] ended"):
        env.step(np.zeros(3, dtype=np.int64))
    env.reset(options={"reset_mask": np.array([False, True, False])})
    assert not env.step(np.full(3, A["R"]))[3].any()  # each horizon counts from its own reset
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(3, dtype=np.int64)})
    with pytest.raises(ValueError, match="SAME_STEP or DISABLED"):
        GridworldVectorEnv("ThreeRoom", autoreset_mode=AutoresetMode.NEXT_STEP)


def test_disabled_autoreset_draws_as_same_step():
    """Same seed and actions: DISABLED with a reset after each ended episode sees what SAME_STEP does (its
    step observations are SAME_STEP's final ones, its resets SAME_STEP's reset ones): one draw order."""
    same = GridworldVectorEnv("FourRoomStuck", num_envs=8)
    disabled = GridworldVectorEnv("FourRoomStuck", num_envs=8, autoreset_mode=AutoresetMode.DISABLED)
    resets = assert_disabled_draws_as_same_step(same, disabled, np.random.default_rng(0).integers(4, size=(450, 8)))
    assert resets >= 16  # the 200-step horizon, twice per env


def test_seeding_reproducibility():
    def trajectory(seed):
        env = GridworldVectorEnv("FourRoomStuck", num_envs=8)
        frames = [env.reset(seed=seed)[0]]
        for actions in np.random.default_rng(0).integers(4, size=(300, 8)):
            frames.append(env.step(actions)[0])
        return np.stack(frames)

    first = trajectory(11)
    np.testing.assert_array_equal(first, trajectory(11))
    assert not np.array_equal(first, trajectory(12))  # Q tiles draw differently

    spawns = [GridworldVectorEnv("ThreeRoom", num_envs=64).reset(seed=s)[0].argmax(-1) for s in (4, 4, 5)]
    np.testing.assert_array_equal(spawns[0], spawns[1])
    assert not np.array_equal(spawns[0], spawns[2])


# --- TorchRL ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_torchrl_gym_wrapper_rollout_keeps_final_and_reset_observations(mode):
    from torchrl.envs import GymWrapper

    layout = LAYOUTS["FourRoomStuck"]
    vec = gymnasium.make_vec("sun_lightning/FourRoomStuck-v0", num_envs=2, vectorization_mode="vector_entry_point",
                             autoreset_mode=mode)
    env = GymWrapper(vec, categorical_action_encoding=True)
    plan = iter(FOUR_ROOM_TO_GOAL + [A["L"]] * 5)

    def policy(td):
        td["action"] = torch.tensor([next(plan), A["L"]])
        return td

    env.set_seed(0)
    rollout = env.rollout(len(FOUR_ROOM_TO_GOAL) + 5, policy, break_when_any_done=False)
    done_at = len(FOUR_ROOM_TO_GOAL) - 1
    done = rollout["next", "done"].squeeze(-1)
    assert done[0].nonzero().flatten().tolist() == [done_at] and not done[1].any()
    assert rollout["next", "terminated"][0, done_at].item()
    assert rollout["next", "observation"][0, done_at].argmax().item() == layout.index(11, 11)
    assert rollout["observation"][0, done_at + 1].argmax().item() == layout.index(1, 1)
    assert (rollout["observation"][1].argmax(-1) == layout.index(1, 1)).all()
    assert (rollout["next", "reward"] == 0).all()
