"""Classic-control environments: registration, goal projections, Pendulum's
discrete torques, TorchRL vector wrapping and seeding (SPEC §2, §6)."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch

from sun_lightning.envs import classic
from sun_lightning.envs.registry import env_ids, goal_space

BASE = {
    "sun_lightning/MountainCar-v0": "MountainCar-v0",
    "sun_lightning/Pendulum-v0": "Pendulum-v1",
    "sun_lightning/Acrobot-v0": "Acrobot-v1",
    "sun_lightning/CartPole-v0": "CartPole-v1",
    "sun_lightning/LunarLander-v0": "LunarLander-v3",
    "sun_lightning/LunarLanderFull-v0": "LunarLander-v3",
}


def test_registered_ids():
    assert set(classic.CLASSIC_IDS) == set(BASE)
    assert set(BASE) <= set(env_ids())


@pytest.mark.parametrize("env_id", sorted(BASE))
def test_make_spaces_match_goal_space(env_id):
    gs = goal_space(env_id)
    assert gs.discrete and gs.reach == "radius" and gs.rho == 0.1 and not gs.exact_counts
    assert len(gs.low) == len(gs.high) == gs.goal_dim
    if gs.metric_low:
        assert len(gs.metric_low) == len(gs.metric_high) == gs.goal_dim

    env = gymnasium.make(env_id)
    assert env.observation_space.shape == (gs.obs_dim,)
    assert env.observation_space.dtype == np.float32
    assert env.action_space == gymnasium.spaces.Discrete(gs.num_actions)
    # SPEC §6: gymnasium's own horizon.
    assert env.spec.max_episode_steps == gymnasium.spec(BASE[env_id]).max_episode_steps
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32
    env.close()

    venv = gymnasium.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point")
    assert isinstance(venv, gymnasium.vector.SyncVectorEnv)
    assert venv.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert venv.single_observation_space.shape == (gs.obs_dim,)
    assert venv.single_action_space == gymnasium.spaces.Discrete(gs.num_actions)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (4, gs.obs_dim) and obs.dtype == np.float32
    obs, reward, term, trunc, _ = venv.step(venv.action_space.sample())
    assert obs.shape == (4, gs.obs_dim) and reward.shape == term.shape == trunc.shape == (4,)
    # The sub-envs carry the same horizon as the single env.
    assert venv.envs[0]._max_episode_steps == gymnasium.spec(BASE[env_id]).max_episode_steps
    venv.close()


def _expected_goal(env_id: str, env: gymnasium.Env) -> np.ndarray:
    """The goal g_s computed from the underlying simulator's state, not the obs."""
    u = env.unwrapped
    if env_id.endswith("MountainCar-v0"):
        return np.asarray(u.state)  # (x, ẋ)
    if env_id.endswith("Pendulum-v0"):
        th, thdot = u.state
        return np.array([math.cos(th), math.sin(th), thdot])
    if env_id.endswith("Acrobot-v0"):
        th1, th2 = u.state[:2]
        return np.array([math.cos(th1), math.sin(th1), math.cos(th2), math.sin(th2)])
    if env_id.endswith("CartPole-v0"):
        x, _, th, _ = u.state
        return np.array([x, th])
    # LunarLander: the (x, y) normalization of gymnasium's lunar_lander.step.
    from gymnasium.envs.box2d import lunar_lander as ll

    pos = u.lander.position
    half_w, half_h = ll.VIEWPORT_W / ll.SCALE / 2, ll.VIEWPORT_H / ll.SCALE / 2
    xy = np.array([(pos.x - half_w) / half_w, (pos.y - (u.helipad_y + ll.LEG_DOWN / ll.SCALE)) / half_h])
    return xy  # LunarLanderFull: checked on the first two of its 8 goal dimensions


@pytest.mark.parametrize("env_id", sorted(BASE))
def test_projection_matches_simulator_state(env_id):
    gs = goal_space(env_id)
    env = gymnasium.make(env_id)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs, *_ = env.step(int(rng.integers(gs.num_actions)))
        goal = gs.project(torch.as_tensor(obs)).numpy()
        assert goal.shape == (gs.goal_dim,)
        want = _expected_goal(env_id, env)
        np.testing.assert_allclose(goal[: len(want)], want, rtol=1e-5, atol=1e-5)
    if gs.goal_dims is None:  # LunarLanderFull: the whole observation
        np.testing.assert_array_equal(goal, obs)
    # Batched projection keeps the leading dims.
    assert gs.project(torch.zeros(3, 5, gs.obs_dim)).shape == (3, 5, gs.goal_dim)
    env.close()


def test_bounds():
    cp = goal_space("sun_lightning/CartPole-v0")
    assert cp.high == pytest.approx((2.4, math.radians(12)))
    ll = goal_space("sun_lightning/LunarLander-v0")
    assert ll.low == (-1.0, -0.59) and ll.high == (1.0, math.inf)
    assert ll.metric_low == (-1.0, -0.25) and ll.metric_high == (1.0, 10.0)
    full = goal_space("sun_lightning/LunarLanderFull-v0")
    assert full.goal_dims is None and full.goal_dim == 8
    assert all(math.isfinite(h) for h in full.metric_high)  # k-NN normalization needs finite bounds


def test_pendulum_torques_match_continuous_pendulum():
    torques = np.linspace(-2, 2, 8)
    np.testing.assert_allclose(classic.PENDULUM_TORQUES, torques, rtol=0, atol=1e-7)
    ours = gymnasium.make("sun_lightning/Pendulum-v0")
    raw = gymnasium.make("Pendulum-v1")
    u = ours.unwrapped
    for i, torque in enumerate(torques):
        o1, _ = ours.reset(seed=10 + i)
        o2, _ = raw.reset(seed=10 + i)
        np.testing.assert_array_equal(o1, o2)
        th, thdot = u.state
        for _ in range(3):
            o1, r1, *_ = ours.step(i)
            o2, r2, *_ = raw.step(np.array([torque], dtype=np.float32))
            np.testing.assert_array_equal(o1, o2)
            assert r1 == pytest.approx(r2)
        # Recover the applied torque from one step of Pendulum's dynamics:
        # θ̇' = θ̇ + (3g/(2l) sin θ + 3/(m l²) u) dt (unclipped while |θ̇'| < 8).
        th, thdot = u.state
        ours.step(i)
        new_thdot = u.state[1]
        assert abs(new_thdot) < u.max_speed
        applied = ((new_thdot - thdot) / u.dt - 3 * u.g / (2 * u.l) * math.sin(th)) * u.m * u.l**2 / 3
        assert applied == pytest.approx(torque, abs=1e-4)
    ours.close()
    raw.close()


@pytest.mark.parametrize("mode", [gymnasium.vector.AutoresetMode.SAME_STEP, gymnasium.vector.AutoresetMode.DISABLED])
def test_torchrl_autoreset_modes(mode):
    from torchrl.envs import GymWrapper

    venv = gymnasium.make_vec("sun_lightning/CartPole-v0", num_envs=4, vectorization_mode="vector_entry_point",
                              autoreset_mode=mode)
    assert venv.metadata["autoreset_mode"] == mode
    env = GymWrapper(venv, categorical_action_encoding=True)
    env.set_seed(0)
    torch.manual_seed(0)
    td = env.rollout(100, break_when_any_done=False)
    assert td.batch_size == torch.Size([4, 100])
    assert td["action"].dtype == torch.int64 and td["action"].shape == (4, 100)
    obs, next_obs, done = td["observation"], td["next", "observation"], td["next", "done"].squeeze(-1)
    b, t = torch.nonzero(done[:, :-1], as_tuple=True)
    assert len(b) > 0, "random CartPole should fall within 100 steps"
    th = math.radians(12)
    for bi, ti in zip(b.tolist(), t.tolist()):
        final, root = next_obs[bi, ti], obs[bi, ti + 1]
        # next.observation is the terminal obs (pole or cart out of bounds) ...
        assert abs(final[0]) > 2.4 or abs(final[2]) > th
        # ... and the following root observation is a fresh reset (all in ±0.05).
        assert root.abs().max() <= 0.05
        assert not torch.equal(final, root)
    # Without a done, the next root is the previous next.observation.
    keep = ~done[:, :-1]
    assert torch.equal(next_obs[:, :-1][keep], obs[:, 1:][keep])
    env.close()


def test_vector_entry_point_rejects_next_step_autoreset():
    with pytest.raises(ValueError, match="SAME_STEP or DISABLED"):
        gymnasium.make_vec("sun_lightning/CartPole-v0", num_envs=2, vectorization_mode="vector_entry_point",
                           autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP)


def test_torchrl_pendulum_discrete_actions():
    from torchrl.envs import GymWrapper

    env = GymWrapper(gymnasium.make_vec("sun_lightning/Pendulum-v0", num_envs=4), categorical_action_encoding=True)
    assert env.action_spec.shape == (4,) and env.action_spec.space.n == 8
    td = env.rollout(5)
    assert td["next", "observation"].shape == (4, 5, 3)
    env.close()


@pytest.mark.parametrize("env_id", sorted(BASE))
def test_seeding_reproducible(env_id):
    def run(seed):
        venv = gymnasium.make_vec(env_id, num_envs=2)
        venv.action_space.seed(123)
        out = [venv.reset(seed=seed)[0]]
        for _ in range(30):
            out.append(venv.step(venv.action_space.sample())[0])
        venv.close()
        return np.stack(out)

    a, b = run(5), run(5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, run(6))
