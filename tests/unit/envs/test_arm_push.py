"""ArmPush-H (SPEC §6): scene, controller, physics stability, batched = single-world MuJoCo, resets, seeding,
bad actions, registration and TorchRL wrapping.

The batched env is checked against a plain loop of ``mujoco.mj_step`` on one ``MjData`` per world, and its
observation against MuJoCo's own functions (``mj_objectVelocity``, ``actuator_force``) on such a world.
"""

import math

import gymnasium
import mujoco
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tests.helpers import assert_single_env_follows

from sun_lightning.envs import arm_push as ap
from sun_lightning.envs.arm_push import ArmPushVectorEnv
from sun_lightning.envs.registry import goal_space

ENV_ID = "sun_lightning/ArmPushH-v0"


def plain_worlds(env: ArmPushVectorEnv) -> list[mujoco.MjData]:
    """One MjData per world of ``env``, holding its current state (a fresh model, compiled apart)."""
    model = ap.build_model()
    worlds = []
    for i in range(env.num_envs):
        d = mujoco.MjData(model)
        d.qpos[:], d.qvel[:], d.ctrl[:] = env.qpos[i], env.qvel[i], env.ctrl[i]
        mujoco.mj_forward(model, d)
        worlds.append(d)
    return worlds


def plain_step(d: mujoco.MjData, action: np.ndarray) -> None:
    ap.actions_to_ctrl(np.asarray(action, dtype=np.float64), out=d.ctrl)
    for _ in range(ap.FRAME_SKIP):
        mujoco.mj_step(d.model, d)
    mujoco.mj_forward(d.model, d)


def sticky_actions(rng: np.random.Generator, obs: np.ndarray, state: dict) -> np.ndarray:
    """Random actions held for 1-30 steps; odd worlds aim the hand at table height near their cube."""
    n = obs.shape[0]
    if "a" not in state:
        state["a"], state["hold"] = np.zeros((n, 5)), np.zeros(n, dtype=int)
    new = state["hold"] <= 0
    for i in np.flatnonzero(new):
        a = rng.uniform(-1, 1, 5)
        if i % 2:
            azimuth = math.atan2(obs[i, 1], obs[i, 0])
            a[0] = (azimuth - 1.5708) / 1.2217 + rng.normal(0, 0.1)
            a[1:4] = np.array([0.3, 0.1, -0.75]) + rng.normal(0, 0.15, 3)
        state["a"][i] = np.clip(a, -1, 1)
        state["hold"][i] = rng.integers(1, 31)
    state["hold"] -= 1
    return state["a"].copy()


# --- scene and controller -----------------------------------------------------------------


def test_scene_collisions_and_options():
    m = ap.arm_push_model()
    assert (m.nq, m.nv, m.nu) == (16, 15, 9) and m.opt.timestep == ap.TIMESTEP == 0.002
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST and ap.FRAME_SKIP == 25
    colliding = {m.body(m.geom_bodyid[g]).name for g in range(m.ngeom) if m.geom_contype[g] or m.geom_conaffinity[g]}
    # Only the hand (on link 7), the fingers, the cube and the plane (world) touch anything.
    assert colliding == {"world", "panda0_link7", "panda0_leftfinger", "panda0_rightfinger", "cube"}
    link7 = [g for g in range(m.ngeom) if m.body(m.geom_bodyid[g]).name == "panda0_link7" and m.geom_contype[g]]
    assert [m.mesh(m.geom_dataid[g]).name for g in link7] == ["hand_col"]
    assert m.nmesh == 10 and all(not m.mesh(i).name.endswith("_viz") for i in range(m.nmesh))
    arm = [b for b in range(m.nbody) if m.body(b).name.startswith("panda0_")]
    assert (m.body_gravcomp[arm] == 1).all() and m.body("cube").mass[0] == pytest.approx(0.216)
    assert m.geom("floor").type == mujoco.mjtGeom.mjGEOM_PLANE and m.geom("floor").size[0] == 0  # infinite
    # The joint ranges are the Panda's (menagerie convention shifted by the link-6 frame turn).
    np.testing.assert_allclose(m.joint("robot:panda0_joint4").range, [-3.0718, -0.0698])
    np.testing.assert_allclose(m.joint("robot:panda0_joint6").range, [-0.0175 - 1.57, 3.7525 - 1.57])


def test_action_map_is_the_baselines():
    ctrl = ap.actions_to_ctrl(np.array([[-1, -1, -1, -1, -1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0.0]]))
    # Baselines (menagerie convention): min [0.3491, 0, _, -3.0718, _, 2.3562, 1.4487], max [2.7925, 1.48353, _,
    # -0.0698, _, 3.7525, 1.4487]; joints 3, 5 at 0; gripper closed for a > 0. Kitchen: j6 - 1.57, j7 - 0.7854.
    np.testing.assert_allclose(ctrl[0], [0.3491, 0, 0, -3.0718, 0, 2.3562 - 1.57, 1.4487 - 0.7854, 0.04, 0.04])
    np.testing.assert_allclose(ctrl[1], [2.7925, 1.48353, 0, -0.0698, 0, 3.7525 - 1.57, 1.4487 - 0.7854, 0, 0])
    np.testing.assert_allclose(ctrl[2, [0, 1, 3, 5]], [1.5708, 0.741765, -1.5708, 3.05435 - 1.57])
    assert (ctrl[2, 7:] == 0.04).all()  # a = 0 opens
    m = ap.arm_push_model()
    assert (ctrl >= m.actuator_ctrlrange[:, 0]).all() and (ctrl <= m.actuator_ctrlrange[:, 1]).all()


def test_kitchen_joint_offsets_match_the_baselines_kinematics():
    """The kitchen model with joints 6, 7 shifted by -1.57, -0.7854 has the menagerie hand frame: link 7's
    z axis and its orientation about it, from the Denavit-Hartenberg parameters of the Panda (the frames
    of both XMLs up to joint 5 are the same)."""
    m = ap.arm_push_model()
    d = mujoco.MjData(m)

    def dh(a, dist, alpha, theta):
        ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
        return np.array([[ct, -st, 0, a], [st * ca, ct * ca, -sa, -dist * sa], [st * sa, ct * sa, ca, dist * ca],
                         [0, 0, 0, 1]])

    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.uniform(-1.5, 1.5, 7)  # menagerie / Franka convention
        # Franka's modified DH table (a, d, alpha) per joint, then the flange 0.107 along z.
        table = [(0, 0.333, 0), (0, 0, -math.pi / 2), (0, 0.316, math.pi / 2), (0.0825, 0, math.pi / 2),
                 (-0.0825, 0.384, -math.pi / 2), (0, 0, math.pi / 2), (0.088, 0, math.pi / 2)]
        T = np.eye(4)
        for (a, dist, alpha), theta in zip(table, q):
            T = T @ dh(a, dist, alpha, theta)
        T = T @ dh(0, 0.107, 0, 0)
        d.qpos[:7] = q + [0, 0, 0, 0, 0, ap.J6_OFFSET, ap.J7_OFFSET]
        mujoco.mj_kinematics(m, d)
        link7 = d.body("panda0_link7")
        R = link7.xmat.reshape(3, 3)
        np.testing.assert_allclose(link7.xpos + 0.107 * R[:, 2], T[:3, 3], atol=1e-3)
        np.testing.assert_allclose(R, T[:3, :3], atol=5e-3)


def test_cube_spawns_in_its_box_at_rest():
    env = ArmPushVectorEnv(num_envs=64, num_threads=1)
    cubes = []
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        cubes.append(env.qpos[:, 9:12].copy())  # float64; the observation holds them as float32
        np.testing.assert_array_equal(obs[:, :3], cubes[-1].astype(np.float32))
        np.testing.assert_allclose(obs[:, 3:10], np.tile(ap.HOME[:7], (64, 1)), atol=1e-6)
        np.testing.assert_array_equal(env.ctrl, np.tile(ap.HOME, (64, 1)))
        assert (env.qvel == 0).all() and (env.qpos[:, 12:16] == [1, 0, 0, 0]).all()
    cubes = np.concatenate(cubes)
    x, y, z = cubes.T
    assert (x >= -0.45).all() and (x <= -0.35).all() and (y >= 0.60).all() and (y <= 0.70).all()
    np.testing.assert_allclose(z, 0.03, atol=1e-7)
    # Uniform over the box: 1280 draws fill it edge to edge and each quarter holds about a quarter.
    assert x.min() < -0.448 and x.max() > -0.352 and y.min() < 0.602 and y.max() > 0.698
    quarters = np.histogram2d(x, y, bins=2, range=[[-0.45, -0.35], [0.6, 0.7]])[0] / len(x)
    assert np.abs(quarters - 0.25).max() < 0.04
    # The cube rests: 20 idle steps (holding the home pose) move it by less than 1 mm.
    for _ in range(20):
        obs = env.step(np.tile(_home_action(), (64, 1)))[0]
    np.testing.assert_allclose(obs[:, :3], cubes[-64:], atol=1e-3)


def _home_action() -> np.ndarray:
    """The action whose targets are the home pose (gripper open)."""
    centre, half = (ap.TARGET_LOW + ap.TARGET_HIGH) / 2, (ap.TARGET_HIGH - ap.TARGET_LOW) / 2
    return np.r_[(ap.HOME[[0, 1, 3, 5]] - centre) / half, -1.0]


def test_joints_follow_their_targets():
    """Position actuators (gravity-compensated arm) bring every joint to its target; held joints stay put."""
    n = 24
    env = ArmPushVectorEnv(num_envs=n, max_episode_steps=1000)
    env.reset(seed=0)
    actions = np.random.default_rng(1).uniform(-1, 1, (n, 5))
    m = env.model
    target = np.clip(ap.actions_to_ctrl(actions), m.jnt_range[:9, 0], m.jnt_range[:9, 1])
    # Keep the targets whose hand and fingers clear the plane (the plane stops the others, as it should).
    d = mujoco.MjData(m)
    touching = [g for g in range(m.ngeom) if m.geom_contype[g] and m.geom_bodyid[g] not in (0, m.body("cube").id)]
    clear = np.zeros(n, dtype=bool)
    for i in range(n):
        d.qpos[:9] = target[i]
        mujoco.mj_kinematics(m, d)
        clear[i] = min(d.geom_xpos[g][2] - m.geom_rbound[g] for g in touching) > 0.05
    assert clear.sum() >= 8
    errors = []
    for t in range(100):
        env.step(actions)
        errors.append(np.abs(env.qpos[:, :9] - target)[clear].max(0))
    errors = np.array(errors)
    assert errors[-1].max() < 1e-3, errors[-1]  # arm joints 1-7 and fingers on target after 5 s
    assert errors[:, [2, 4, 6]].max() < 0.05  # joints 3, 5, 7 held throughout
    assert errors[0, [0, 1, 3, 5]].max() > 0.1  # (the targets were far: the joints did move)


def test_scripted_push_moves_the_cube_along_the_plane():
    """Lower the closed gripper beside the cube at table height and sweep joint 1: the cube is pushed."""
    env = ArmPushVectorEnv(num_envs=1, max_episode_steps=1000)
    obs, _ = env.reset(seed=4)
    start = obs[0, :3].copy()
    azimuth = math.degrees(math.atan2(start[1], start[0]))

    def action(deg, pose):
        return np.array([[(math.radians(deg) - 1.5708) / 1.2217, *pose, 1.0]])

    high, low = (-0.15, 0.0, -0.85), (0.3, 0.1, -0.75)  # hand at r ≈ 0.75 m, z ≈ 0.2 / on the plane
    plan = [action(azimuth + 18, high)] * 60 + [action(azimuth + 18, low)] * 40
    plan += [action(azimuth + 18 - 2 * k, low) for k in range(25)] + [action(azimuth - 32, low)] * 30
    zs = []
    for a in plan:
        obs = env.step(a)[0]
        zs.append(obs[0, 2])
    end = obs[0, :3]
    assert np.linalg.norm(end[:2] - start[:2]) > 0.15
    assert math.degrees(math.atan2(end[1], end[0])) < azimuth - 10  # swept toward +x
    assert 0.025 < min(zs) and max(zs) < 0.06  # slid on the plane, at most tilted
    assert env.num_restores == 0


def test_random_rollouts_stay_finite_and_on_the_plane():
    n = 16
    env = ArmPushVectorEnv(num_envs=n, autoreset_mode=AutoresetMode.DISABLED)
    obs, _ = env.reset(seed=7)
    start = obs[:, :2].copy()
    rng, state = np.random.default_rng(7), {}
    z_low, z_high, speed = np.inf, -np.inf, 0.0
    for _ in range(ap.HORIZON):
        obs, _, terminated, truncated, _ = env.step(sticky_actions(rng, obs, state))
        assert obs.dtype == np.float32 and np.isfinite(obs).all() and not terminated.any()
        z_low, z_high = min(z_low, obs[:, 2].min()), max(z_high, obs[:, 2].max())
        speed = max(speed, np.abs(env.qvel).max())
    assert truncated.all() and env.num_restores == 0
    assert (env.batch.warning[:, :, 1] == 0).all()  # no MuJoCo warning in any world
    assert 0.025 < z_low and z_high < 0.3  # the cube stays on the plane (pressed, tilted or held at most)
    assert speed < 50
    moved = np.linalg.norm(obs[:, :2] - start, axis=1)
    assert (moved > 0.01).sum() >= 3  # contacts happened: some cubes were pushed


@pytest.mark.slow
def test_stress_rollouts_many_worlds():
    """64 worlds, two episodes each of uniform, sticky cube-seeking and bang-bang random actions."""
    n = 64
    for policy in ("uniform", "sticky", "bang"):
        env = ArmPushVectorEnv(num_envs=n, autoreset_mode=AutoresetMode.DISABLED)
        for episode in range(2):
            obs, _ = env.reset(seed=episode)
            rng, state = np.random.default_rng(episode), {}
            for t in range(ap.HORIZON):
                if policy == "uniform":
                    a = rng.uniform(-1, 1, (n, 5))
                elif policy == "sticky":
                    a = sticky_actions(rng, obs, state)
                elif t % 10 == 0:
                    a = np.where(rng.uniform(size=(n, 5)) < 0.5, -1.0, 1.0)
                obs = env.step(a)[0]
                assert np.isfinite(obs).all() and 0.025 < obs[:, 2].min() and obs[:, 2].max() < 0.3
                assert np.abs(env.qvel).max() < 50
        assert env.num_restores == 0 and (env.batch.warning[:, :, 1] == 0).all()


# --- batched env = plain MuJoCo -------------------------------------------------------------


def test_batched_env_equals_single_world_mj_step():
    env = ArmPushVectorEnv(num_envs=4, max_episode_steps=10_000, num_threads=2)
    obs, _ = env.reset(seed=3)
    start = obs[:, :2].copy()
    worlds = plain_worlds(env)
    observer = ap.Observer(worlds[0].model)
    np.testing.assert_array_equal(obs, np.stack([observer.of_data(d) for d in worlds]))
    rng, state = np.random.default_rng(0), {}
    for _ in range(300):
        actions = sticky_actions(rng, obs, state).astype(np.float32)
        obs = env.step(actions)[0]
        for d, a in zip(worlds, actions):
            plain_step(d, a)
        np.testing.assert_array_equal(env.qpos, np.stack([d.qpos for d in worlds]))
        np.testing.assert_array_equal(env.qvel, np.stack([d.qvel for d in worlds]))
        np.testing.assert_array_equal(obs, np.stack([observer.of_data(d) for d in worlds]))
    assert np.linalg.norm(obs[:, :2] - start, axis=1).max() > 0.01  # the comparison covered cube contacts


def test_observation_is_mujocos():
    """Each observation entry against MuJoCo's own functions on the same state."""
    env = ArmPushVectorEnv(num_envs=3, max_episode_steps=1000)
    obs, _ = env.reset(seed=2)
    rng, state = np.random.default_rng(2), {}
    for _ in range(60):
        obs = env.step(sticky_actions(rng, obs, state))[0]
    for i, d in enumerate(plain_worlds(env)):
        m = d.model
        o = obs[i].astype(np.float64)
        np.testing.assert_allclose(o[0:3], d.body("cube").xpos, atol=1e-6)
        np.testing.assert_allclose(o[3:10], d.qpos[:7], atol=1e-6)
        np.testing.assert_allclose(o[10:13], d.site("end_effector").xpos, atol=1e-6)
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, m.site("end_effector").id, vel, 0)
        np.testing.assert_allclose(o[13:16], vel[3:], atol=1e-5)
        assert o[16] == pytest.approx(d.qpos[7] + d.qpos[8], abs=1e-6)
        assert o[17] == pytest.approx(0.1 * d.actuator_force[7:9].mean(), abs=1e-5)
    assert np.abs(obs[:, 13:16]).max() > 1e-3  # the arm is moving


# --- resets, seeding, actions, registration, TorchRL -------------------------------------------------


def test_seeds_reproduce():
    def trajectory(seed, n=4):
        env = ArmPushVectorEnv(num_envs=n, max_episode_steps=30)
        frames = [env.reset(seed=seed)[0]]
        for a in np.random.default_rng(0).uniform(-1, 1, size=(70, n, 5)):
            frames.append(env.step(a)[0])
        return np.stack(frames)

    first = trajectory(11)
    np.testing.assert_array_equal(first, trajectory(11))  # autoresets at 30 and 60 included
    assert not np.array_equal(first[0, :, :2], trajectory(12)[0, :, :2])
    assert not np.array_equal(first[31, :, :2], first[0, :, :2])  # a new start after the autoreset
    # The single env (gymnasium.make) runs the same physics and draws its start alike.
    single = gymnasium.make(ENV_ID)
    one = trajectory(5, n=1)
    assert_single_env_follows(single, one[:, 0], np.random.default_rng(0).uniform(-1, 1, size=(20, 1, 5))[:, 0], seed=5)


def test_partial_reset_and_autoreset():
    env = gymnasium.make_vec(ENV_ID, num_envs=4, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED, max_episode_steps=5)
    fresh = ArmPushVectorEnv(num_envs=4).reset(seed=9)[0]
    env.reset(seed=1)
    actions = np.random.default_rng(0).uniform(-1, 1, (4, 5))
    for _ in range(5):
        obs, _, _, truncated, info = env.step(actions)
    assert truncated.all() and info == {}
    with pytest.raises(RuntimeError, match=r"sub-environments \[0, 1, 2, 3\] ended"):
        env.step(actions)
    qpos = env.unwrapped.qpos.copy()
    mask = np.array([True, False, True, False])
    new, _ = env.reset(seed=9, options={"reset_mask": mask})
    np.testing.assert_array_equal(new[mask], fresh[mask])  # the starts a full reset with that seed draws
    np.testing.assert_array_equal(new[~mask], obs[~mask])  # the others untouched
    np.testing.assert_array_equal(env.unwrapped.qpos[~mask], qpos[~mask])
    with pytest.raises(RuntimeError, match=r"sub-environments \[1, 3\] ended"):
        env.step(actions)
    # SAME_STEP (the default): worlds come back reset, their last observation in final_obs.
    same = ArmPushVectorEnv(num_envs=2, max_episode_steps=3)
    same.reset(seed=0)
    for t in range(3):
        obs, reward, terminated, truncated, info = same.step(np.zeros((2, 5)))
        assert (reward == 0).all() and not terminated.any() and truncated.all() == (t == 2)
    final = np.stack(list(info["final_obs"]))
    assert np.abs(final[:, 13:16]).max() > 1e-3 and np.abs(obs[:, 13:16]).max() == 0  # moving / fresh at rest


def test_bad_actions_raise():
    env = ArmPushVectorEnv(num_envs=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"ArmPushH: actions must have shape \(2, 5\), got \(2, 9\)"):
        env.step(np.zeros((2, 9)))
    with pytest.raises(ValueError, match=r"actions must be finite, got nan at index \(1, 4\)"):
        env.step(np.array([[0, 0, 0, 0, 0], [0, 0, 0, 0, np.nan]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"actions must lie in \[-1, 1\], got 1.5 at index \(0, 2\)"):
        env.step(np.array([[0, 0, 1.5, 0, 0], [0, 0, 0, 0, 0]]))
    assert env.step(np.full((2, 5), 1 + 1e-7))[0].shape == (2, 18)  # rounding noise is clipped
    single = gymnasium.make(ENV_ID)
    single.reset(seed=0)
    with pytest.raises(ValueError, match=r"ArmPushH: actions must have shape \(5,\), got \(4,\)"):
        single.step(np.zeros(4))


def test_registration_and_goal_space():
    space = goal_space(ENV_ID)
    assert (space.obs_dim, space.num_actions, space.action_dim, space.goal_dims) == (18, 0, 5, (0, 1))
    assert space.low == (-math.inf, -math.inf) and space.high == (math.inf, math.inf)
    assert space.metric_low == (-1.0, -0.4) and space.metric_high == (1.0, 1.0)
    assert (space.rho, space.reach, space.eta) == (0.01, "distance", 0.1)
    env = gymnasium.make(ENV_ID)
    assert env.spec.max_episode_steps == 250
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    np.testing.assert_array_equal(space.project(torch.from_numpy(obs)).numpy(), obs[:2])
    vec = gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode="vector_entry_point")
    assert isinstance(vec.unwrapped, ArmPushVectorEnv) and vec.unwrapped.horizon == 250
    assert vec.single_action_space.shape == (5,) and vec.action_space.shape == (3, 5)


def test_torchrl_gym_wrapper_rollout():
    from torchrl.envs import GymWrapper

    vec = gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.DISABLED)
    env = GymWrapper(vec)
    env.set_seed(0)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["observation"].shape == (3, 5, 18) and rollout["action"].shape == (3, 5, 5)
    assert torch.isfinite(rollout["next", "observation"]).all()
    assert not rollout["next", "done"].any() and (rollout["next", "reward"] == 0).all()
    np.testing.assert_array_equal(rollout["observation"][:, 1:].numpy(), rollout["next", "observation"][:, :-1].numpy())
