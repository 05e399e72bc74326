"""Ant mazes of SPEC §6 on batched MuJoCo: maze geometry, walls, physics against plain ``mj_step``, autoreset,
seeding, bad input and TorchRL wrapping.

Maps are this file's own copy of the SPEC §6 text; the physics reference is a loop over one ``MjData`` per
world written here (``mj_step`` x 5 per env step, the height rule by ``mj_getState``/``mj_setState``).
"""

import gymnasium
import mujoco
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tests.helpers import assert_disabled_draws_as_same_step, assert_single_env_follows

from sun_lightning.envs import goal_space
from sun_lightning.envs.ant_maze import FOOT_GEOMS, AntMazeVectorEnv, maze_model
from sun_lightning.envs.mujoco_vec import MujocoVectorEnv

SPEC_MAPS = {
    "AntMazeS": ["#######", "#.....#", "#.#.#.#", "#.....#", "#.#.#.#", "#.....#", "#######"],
    "AntMazeH": [
        "###########", "#.....#...#", "#.#...#.#.#", "#..#......#", "#.....#.###", "#.........#",
        "#.........#", "#..#...#..#", "#.#.....#.#", "#.........#", "###########",
    ],
}
HORIZON = {"AntMazeS": 250, "AntMazeH": 500}
BOUND = {"AntMazeS": 17.5, "AntMazeH": 27.5}
NAMES = ["AntMazeS", "AntMazeH"]
TORSO_RADIUS = 0.25  # gymnasium's ant torso sphere, which does not collide with walls (only the feet do)
FOOT_RADIUS = 0.08  # the lower-leg capsules, which do
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


def wall_centres(name: str) -> np.ndarray:
    """``[W, 2]`` (x, y) of the wall cells' centres: cell (i, j) at (5i - c, 5j - c), c = 5 (n - 1) / 2."""
    rows = SPEC_MAPS[name]
    c = 5 * (len(rows) - 1) / 2
    return np.array([(5 * i - c, 5 * j - c) for i, row in enumerate(rows) for j, ch in enumerate(row) if ch == "#"])


def wall_depth(xy: np.ndarray, name: str) -> np.ndarray:
    """How deep each point ``[..., 2]`` lies inside a wall cell, the deepest over cells (negative: outside all)."""
    d = 2.5 - np.abs(xy[..., None, :] - wall_centres(name))  # [..., W, 2]
    return d.min(-1).max(-1)


def geom_ids(model, prefix: str) -> list[int]:
    return [g for g in range(model.ngeom) if model.geom(g).name.startswith(prefix)]


def collide(model, a: int, b: int) -> bool:
    """MuJoCo's contype/conaffinity filter for a geom pair."""
    ct, ca = model.geom_contype, model.geom_conaffinity
    return bool((ct[a] & ca[b]) or (ct[b] & ca[a]))


# --- the compiled maze ------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_walls_match_map_and_ant_starts_in_centre(name):
    model = maze_model(name)
    walls = geom_ids(model, "wall_")
    expected = wall_centres(name)
    assert len(walls) == len(expected) == {"AntMazeS": 28, "AntMazeH": 52}[name]  # 24 or 40 border cells + inner walls
    pos = model.geom_pos[walls]
    got = {tuple(p) for p in np.round(pos[:, :2], 9)}
    assert got == {tuple(p) for p in expected}  # one box per wall cell, none elsewhere
    rows = SPEC_MAPS[name]
    c = 5 * (len(rows) - 1) / 2
    free = [(5 * i - c, 5 * j - c) for i, row in enumerate(rows) for j, ch in enumerate(row) if ch == "."]
    assert not got & set(free)
    np.testing.assert_allclose(pos[:, 2], 2.5)  # height 5, standing on the floor
    np.testing.assert_allclose(model.geom_size[walls], 2.5)  # cells of 5 x 5 x 5
    assert (model.geom_type[walls] == mujoco.mjtGeom.mjGEOM_BOX).all()
    assert np.abs(expected).max() + 2.5 == BOUND[name]  # the maze fills the goal bounds, centred on 0
    # Physics options of SPEC §6: 0.05 s per env step, Euler.
    env = AntMazeVectorEnv(name, num_envs=64)
    assert model.opt.timestep * env.frame_skip == pytest.approx(0.05)
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    obs, _ = env.reset(seed=0)
    assert obs.shape == (64, 29) and obs.dtype == np.float32
    assert np.abs(obs[:, :2]).max() <= 0.1 + 1e-6  # the centre cell is at the origin; reset noise 0.1
    assert np.abs(obs[:, 2] - 0.55).max() <= 0.1 + 1e-6 and obs[:, :2].std() > 0.03
    np.testing.assert_allclose(np.linalg.norm(obs[:, 3:7], axis=1), 1, atol=1e-6)


def test_only_feet_collide_with_walls():
    model = maze_model("AntMazeS")
    walls, floor = geom_ids(model, "wall_"), model.geom("floor").id
    ant = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    assert len(ant) == 13
    for g in ant:
        is_foot = model.geom(g).name in FOOT_GEOMS
        assert all(collide(model, g, w) == is_foot for w in walls), model.geom(g).name
        assert collide(model, g, floor)  # the whole body still stands on the floor, as gymnasium's ant
    assert not any(collide(model, w, floor) for w in walls)


# --- walls and stability ------------------------------------------------------------------


def push_into_walls(name: str, walls_collide: bool, steps: int = 200, n: int = 32):
    """Ants spawned across the free cells, pushed (5 N, about half their weight) in a fixed direction each under
    random actions. Returns the torso (x, y) ``[steps, n, 2]``, foot centres ``[steps, n, 4, 2]`` and the env."""
    rng = np.random.default_rng(1)
    env = AntMazeVectorEnv(name, num_envs=n, max_episode_steps=10**6, num_threads=2)
    if not walls_collide:
        env.batch.expand("geom_conaffinity")[:, geom_ids(env.model, "wall_")] = 0
    env.reset(seed=1)
    rows = SPEC_MAPS[name]
    c = 5 * (len(rows) - 1) / 2
    free = np.array([(5 * i - c, 5 * j - c) for i, row in enumerate(rows) for j, ch in enumerate(row) if ch == "."])
    env.qpos[:, :2] = free[rng.integers(len(free), size=n)] + rng.uniform(-1, 1, size=(n, 2))
    angle = rng.uniform(0, 2 * np.pi, size=n)
    env.batch.bind("xfrc_applied")[:, env.model.body("torso").id, :2] = 5 * np.stack([np.cos(angle), np.sin(angle)], 1)
    feet = [env.model.geom(g).id for g in FOOT_GEOMS]
    geom_xpos = env.batch.bind("geom_xpos")  # bound before stepping: the batch copies out bound fields only
    torso, foot = [], []
    for _ in range(steps):
        obs = env.step(rng.uniform(-1, 1, size=(n, 8)))[0]
        assert np.isfinite(obs).all()
        torso.append(obs[:, :2])
        foot.append(geom_xpos[:, feet, :2].copy())
    return np.array(torso), np.array(foot), env


@pytest.mark.parametrize("name", NAMES)
def test_walls_block_pushed_random_ants(name):
    torso, foot, env = push_into_walls(name, walls_collide=True)
    depth = wall_depth(torso, name)
    # The torso may overlap a wall (legs straddling a wall corner), its centre never gets a radius deep.
    assert depth.max() < TORSO_RADIUS
    assert wall_depth(foot, name).max() < FOOT_RADIUS  # no foot tunnels: a capsule's axis stays outside
    assert (depth[-1] > -1.5).mean() > 0.5  # most ants end pressed against a wall
    assert env.num_diverged == 0 and (env.batch.warning[:, :, 1] == 0).all() and np.abs(env.qvel).max() < 50
    # The same pushes with the walls' contacts switched off carry torsos into the walls: the check has teeth.
    loose, _, _ = push_into_walls(name, walls_collide=False)
    assert wall_depth(loose, name).max() > 2


def test_random_gait_is_stable_and_kept_out_of_walls():
    env = AntMazeVectorEnv("AntMazeS", num_envs=16, num_threads=2)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    closest = np.inf
    for _ in range(4 * HORIZON["AntMazeS"]):  # four episodes, SAME_STEP autoreset included
        obs = env.step(rng.uniform(-1, 1, size=(16, 8)))[0]
        assert np.isfinite(obs).all() and np.abs(obs[:, 15:]).max() < 50
        depth = wall_depth(obs[:, :2], "AntMazeS")
        assert depth.max() < TORSO_RADIUS
        closest = min(closest, -depth.max())
        assert ((obs[:, 2] >= 0.2) & (obs[:, 2] <= 2)).all()
    assert env.num_diverged == 0 and (env.batch.warning[:, :, 1] == 0).all()
    assert closest < 1.5  # some ant reached a wall


@pytest.mark.slow
def test_long_random_run_is_stable():
    env = AntMazeVectorEnv("AntMazeS", num_envs=64, num_threads=2)
    obs, _ = env.reset(seed=5)
    rng = np.random.default_rng(5)
    for _ in range(20 * HORIZON["AntMazeS"]):
        obs = env.step(rng.uniform(-1, 1, size=(64, 8)))[0]
        assert np.isfinite(obs).all() and np.abs(obs[:, 15:]).max() < 100
        assert wall_depth(obs[:, :2], "AntMazeS").max() < TORSO_RADIUS
        assert ((obs[:, 2] >= 0.2) & (obs[:, 2] <= 2)).all()
    assert env.num_diverged == 0 and (env.batch.warning[:, :, 1] == 0).all()


# --- the batch against plain mj_step -----------------------------------------------------------


def reference_step(model, data, action, frame_skip=5) -> bool:
    """One env step of one world: mj_step x frame_skip, undone (velocities zeroed) if the torso leaves [0.2, 2]."""
    saved = np.empty(mujoco.mj_stateSize(model, INTEGRATION))
    mujoco.mj_getState(model, data, saved, INTEGRATION)
    data.ctrl[:] = action
    for _ in range(frame_skip):
        mujoco.mj_step(model, data)
    if 0.2 <= data.qpos[2] <= 2:
        return False
    mujoco.mj_setState(model, data, saved, INTEGRATION)
    data.qvel[:] = 0
    return True


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_env_equals_single_world_mj_step(threads):
    n = 6
    env = AntMazeVectorEnv("AntMazeS", num_envs=n, max_episode_steps=10**6, num_threads=threads)
    env.reset(seed=2)
    env.qvel[1, 2] = 7.0  # thrown upwards: its flight crosses 2 m, so the height rule must fire
    env.qvel[4, 2] = 7.5
    model = maze_model("AntMazeS")
    assert env.batch.nstate == mujoco.mj_stateSize(model, INTEGRATION)
    worlds = []
    for i in range(n):
        data = mujoco.MjData(model)
        mujoco.mj_setState(model, data, env.batch.state[i], INTEGRATION)
        worlds.append(data)
    rng = np.random.default_rng(3)
    restores = np.zeros(n, dtype=int)
    for _ in range(300):
        a = rng.uniform(-1, 1, size=(n, 8))
        obs = env.step(a)[0]
        ref_restored = np.array([reference_step(model, d, ai) for d, ai in zip(worlds, a)])
        np.testing.assert_array_equal(env.restored, ref_restored)
        restores += ref_restored
        ref = np.array([np.concatenate([d.qpos, d.qvel]) for d in worlds])
        np.testing.assert_allclose(env.qpos, ref[:, :15], rtol=0, atol=1e-9)
        np.testing.assert_allclose(env.qvel, ref[:, 15:], rtol=0, atol=1e-9)
        np.testing.assert_allclose(obs, ref.astype(np.float32), rtol=1e-6, atol=1e-6)
    assert restores[1] >= 1 and restores[4] >= 1 and env.num_restores == restores.sum()
    assert np.abs(env.qpos[:, :2]).max() > 0.5  # the ants walked


def test_diverged_world_is_undone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo appends its warnings to MUJOCO_LOG.TXT in the working directory
    env = AntMazeVectorEnv("AntMazeS", num_envs=3, num_threads=2, max_episode_steps=100)
    env.reset(seed=0)
    zeros = np.zeros((3, 8))
    for _ in range(2):  # twice: MuJoCo's own reset clears its warning counters, the repeat must be caught too
        env.step(zeros)
        before = env.qpos.copy()
        env.qvel[1, 6] = 1e11  # beyond mjMAXVAL: MuJoCo would reset world 1 to the model's default pose
        obs = env.step(zeros)[0]
        assert env.restored.tolist() == [False, True, False]
        np.testing.assert_array_equal(env.qpos[1], before[1])
        assert (env.qvel[1] == 0).all() and (obs[1, 15:] == 0).all()
        np.testing.assert_array_equal(obs[1, :15], before[1].astype(np.float32))
        assert not (env.qpos[[0, 2]] == before[[0, 2]]).all(axis=1).any()  # the others stepped
    assert env.num_diverged == env.num_restores == 2


# --- autoreset, partial resets, seeding --------------------------------------------------------


def test_same_step_autoreset_keeps_final_observation():
    env = gymnasium.make_vec("sun_lightning/AntMazeS-v0", num_envs=3, vectorization_mode="vector_entry_point",
                             max_episode_steps=20)
    assert env.autoreset_mode == AutoresetMode.SAME_STEP
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(1, 21):
        obs, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, size=(3, 8)))
        assert not terminated.any() and (reward == 0).all()
        assert truncated.all() == (t == 20) and truncated.any() == (t == 20)
    final = np.stack(list(info["final_obs"]))
    assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"} and final.shape == (3, 29)
    assert np.abs(final[:, :2]).max() > 0.2  # the ants moved away from the start ...
    assert np.abs(obs[:, :2]).max() <= 0.1 + 1e-6  # ... and came back reset


def test_disabled_autoreset_partial_resets():
    env = gymnasium.make_vec("sun_lightning/AntMazeS-v0", num_envs=3, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED, max_episode_steps=10)
    assert env.autoreset_mode == env.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    env.reset(seed=1)
    a = np.full((3, 8), 0.5, dtype=np.float32)
    for _ in range(10):
        obs, _, _, truncated, info = env.step(a)
    assert truncated.all() and info == {}
    with pytest.raises(RuntimeError, match=r"sub-environments \[0, 1, 2\] ended"):
        env.step(a)
    state_before = env.unwrapped.batch.state.copy()
    new, _ = env.reset(options={"reset_mask": np.array([True, False, True])})
    assert (new[1] == obs[1]).all() and (env.unwrapped.batch.state[1] == state_before[1]).all()
    assert not (new[[0, 2]] == obs[[0, 2]]).any(axis=1).any() and np.abs(new[[0, 2], :2]).max() <= 0.1 + 1e-6
    with pytest.raises(RuntimeError, match=r"sub-environments \[1\] ended"):
        env.step(a)
    env.reset(options={"reset_mask": np.array([False, True, False])})
    assert not env.step(a)[3].any()
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    with pytest.raises(ValueError, match="SAME_STEP or DISABLED"):
        AntMazeVectorEnv("AntMazeS", autoreset_mode=AutoresetMode.NEXT_STEP)


def test_disabled_draws_as_same_step():
    same = AntMazeVectorEnv("AntMazeS", num_envs=4, max_episode_steps=7)
    disabled = AntMazeVectorEnv("AntMazeS", num_envs=4, max_episode_steps=7, autoreset_mode="Disabled")
    assert assert_disabled_draws_as_same_step(same, disabled, np.random.default_rng(0).uniform(-1, 1, size=(20, 4, 8))) > 0


def test_seeding_reproducibility_and_single_env():
    def trajectory(seed, num_envs=4, threads=None):
        env = AntMazeVectorEnv("AntMazeH", num_envs=num_envs, max_episode_steps=30, num_threads=threads)
        frames = [env.reset(seed=seed)[0]]
        for a in np.random.default_rng(0).uniform(-1, 1, size=(40, num_envs, 8)):
            frames.append(env.step(a)[0])
        return np.stack(frames)

    first = trajectory(11)
    np.testing.assert_array_equal(first, trajectory(11, threads=1))
    assert not np.array_equal(first[0], trajectory(12)[0])
    env = AntMazeVectorEnv("AntMazeH", num_envs=4)
    env.reset(seed=11)
    for a in np.random.default_rng(0).uniform(-1, 1, size=(5, 4, 8)):
        env.step(a)
    np.testing.assert_array_equal(env.reset(seed=11)[0], first[0])  # a seed given later reseeds
    single = gymnasium.make("sun_lightning/AntMazeH-v0")
    one = trajectory(5, num_envs=1)
    assert_single_env_follows(single, one[:, 0], np.random.default_rng(0).uniform(-1, 1, size=(20, 1, 8))[:, 0], seed=5)


def test_single_env_truncates_at_horizon():
    env = gymnasium.make("sun_lightning/AntMazeS-v0")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    for t in range(1, HORIZON["AntMazeS"] + 1):
        truncated = env.step(env.action_space.sample())[3]
        assert truncated == (t == HORIZON["AntMazeS"])


def test_default_threads_and_horizons():
    env = gymnasium.make_vec("sun_lightning/AntMazeH-v0", num_envs=1, vectorization_mode="vector_entry_point")
    assert env.unwrapped.num_threads == 1 and env.unwrapped.batch.nthread == 1
    assert env.unwrapped.horizon == HORIZON["AntMazeH"]
    env = gymnasium.make_vec("sun_lightning/AntMazeS-v0", num_envs=8, vectorization_mode="vector_entry_point",
                             num_threads=2)
    assert env.unwrapped.batch.nthread == 2 and env.unwrapped.horizon == HORIZON["AntMazeS"]


# --- registration, bad input, TorchRL --------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_goal_space(name):
    space = goal_space(f"sun_lightning/{name}-v0")
    assert (space.obs_dim, space.action_dim, space.num_actions, space.goal_dims) == (29, 8, 0, (0, 1))
    assert (space.reach, space.eta, space.rho) == ("distance", 0.5, 0.1) and not space.discrete
    b = BOUND[name]
    assert space.low == (-b, -b) and space.high == (b, b)
    obs = torch.arange(29.0).expand(3, 29)
    assert space.project(obs).tolist() == [[0.0, 1.0]] * 3  # torso (x, y)


def test_bad_actions_raise():
    env = AntMazeVectorEnv("AntMazeS", num_envs=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 8)))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"AntMazeS: actions must have shape \(2, 8\), got \(2, 3\)"):
        env.step(np.zeros((2, 3), dtype=np.float32))
    a = np.zeros((2, 8), dtype=np.float32)
    a[1, 4] = np.nan
    with pytest.raises(ValueError, match=r"actions must be finite, got nan at index \(1, 4\)"):
        env.step(a)
    a[1, 4], a[0, 7] = 0, -1.5
    with pytest.raises(ValueError, match=r"actions must lie in \[-1, 1\], got -1.5 at index \(0, 7\)"):
        env.step(a)
    a[0, 7] = -1 - 1e-7  # rounding noise is clipped, float32 accepted
    env.step(a)
    assert env.ctrl[0, 7] == -1
    single = gymnasium.make("sun_lightning/AntMazeH-v0")
    single.reset(seed=0)
    with pytest.raises(ValueError, match=r"AntMazeH: actions must have shape \(8,\), got \(2,\)"):
        single.step(np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="unknown maze 'Nope'; known mazes: AntMazeS, AntMazeH"):
        AntMazeVectorEnv("Nope")


def test_torchrl_gym_wrapper_disabled_rollout_with_partial_resets():
    from torchrl.envs import GymWrapper

    vec = gymnasium.make_vec("sun_lightning/AntMazeS-v0", num_envs=4, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED, max_episode_steps=10)
    env = GymWrapper(vec)
    env.set_seed(0)
    first = env.rollout(3, break_when_any_done=False)
    assert first["observation"].shape == (4, 3, 29) and first["action"].shape == (4, 3, 8)
    # Restart env 0 alone, so its episodes end 3 steps out of phase: partial resets from then on.
    td = first[:, -1]["next"].clone()
    td = env.reset(td.update({"_reset": torch.tensor([[True], [False], [False], [False]])}))
    rollout = env.rollout(25, auto_reset=False, tensordict=td, break_when_any_done=False)
    done = rollout["next", "done"].squeeze(-1)
    assert done[0].nonzero().flatten().tolist() == [9, 19]
    assert done[1].nonzero().flatten().tolist() == [6, 16]
    assert not rollout["next", "terminated"].any() and (rollout["next", "reward"] == 0).all()
    obs, nxt = rollout["observation"].numpy(), rollout["next", "observation"].numpy()
    assert np.abs(obs[1, 7, :2]).max() <= 0.1 + 1e-6  # reset after the episode end
    np.testing.assert_array_equal(obs[0, 1:10], nxt[0, :9])  # one env's chain of steps is unbroken
    assert np.isfinite(nxt).all()


# --- the shared machinery with another model ---------------------------------------------------------


class SliderEnv(MujocoVectorEnv):
    """A motor-driven slider whose observation is a site position: a derived field, as an arm's end effector."""

    def __init__(self, num_envs: int, **kwargs) -> None:
        spec = mujoco.MjSpec()
        body = spec.worldbody.add_body(name="cart")
        body.add_joint(name="x", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[1, 0, 0])
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.1, 0, 0])
        body.add_site(name="tip", pos=[0.5, 0, 0])
        spec.add_actuator(target="x", trntype=mujoco.mjtTrn.mjTRN_JOINT, ctrlrange=[-1, 1], ctrllimited=True)
        box = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        obs = gymnasium.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        super().__init__(spec.compile(), name="Slider", single_observation_space=obs, single_action_space=box,
                         horizon=50, frame_skip=3, num_envs=num_envs,
                         outputs=("site_xpos",), observe_stage=mujoco.mjtStage.mjSTAGE_POS, **kwargs)

    def sample_state(self, rng, n):
        return {"qpos": rng.uniform(-1, 1, size=(n, 1))}

    def observe(self):
        return self.batch.bind("site_xpos")[:, 0, :1].astype(np.float32)


def test_machinery_serves_another_model_with_derived_observations():
    env = SliderEnv(num_envs=4, autoreset_mode=AutoresetMode.DISABLED)
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs[:, 0], env.qpos[:, 0] + 0.5, rtol=0, atol=1e-6)  # current after a reset
    for _ in range(5):
        obs = env.step(np.ones((4, 1)))[0]
        np.testing.assert_allclose(obs[:, 0], env.qpos[:, 0] + 0.5, rtol=0, atol=1e-6)  # current after a step
    moved = env.qpos.copy()
    obs, _ = env.reset(options={"reset_mask": np.array([False, True, False, False])})
    np.testing.assert_allclose(obs[:, 0], env.qpos[:, 0] + 0.5, rtol=0, atol=1e-6)
    assert (env.qpos[[0, 2, 3]] == moved[[0, 2, 3]]).all() and env.qpos[1] != moved[1]
    with pytest.raises(ValueError, match=r"Slider: actions must lie in \[-1, 1\], got 2 at index \(3, 0\)"):
        env.step(np.array([[0], [0], [0], [2.0]]))
