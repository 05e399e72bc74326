"""ArmPush-H (SPEC §6): a MuJoCo Franka Panda pushes a cube on an unbounded table plane.

Scene (built with :class:`mujoco.MjSpec` around the gymnasium-robotics kitchen Franka, vendored under
``assets/franka/``; see its README). As in the baselines' ``arm_push_hard`` (JaxGCRL,
``jaxgcrl/envs/manipulation/arm_push_hard.py`` and ``arm_envs.py``, ``assets/panda_push_hard.xml``): the arm's
base stands at the world origin on the plane ``z = 0``, joint 1 turns it about ``z`` and the cube (6 cm,
0.216 kg, a free joint) lies in front of it at ``y > 0``. SPEC's spawn box, x ∈ [−0.45, −0.35],
y ∈ [0.60, 0.70], is thus in the arm's frame and the world frame alike, 0.7–0.8 m from the base (the
Panda reaches 0.85 m horizontally at table height). The cube spawns at rest on the plane, unrotated.

Collisions follow the baselines: only the hand (its mesh, on link 7's body) and the fingers touch anything,
the plane and the cube; the links' own meshes pass through both, the fingers do not collide with each other,
the cube collides with the plane. The plane's and the cube's contacts are stiffer than MuJoCo's default
(``solref`` time constant 0.005 s instead of 0.02 s): the hand presses with up to ~100 N, which sank the
light cube up to 9 mm into the plane with the default, and 1.4 mm with this.

Controller (the baselines' joint-angle control): the action ``a ∈ [−1, 1]^5`` sets the targets of the
kitchen model's own position actuators: ``a[0:4]`` map linearly to joints 1, 2, 4, 6 over the baselines'
ranges (joint 1 ∈ [20°, 160°], joint 2 ∈ [0°, 85°], joint 4 ∈ [−176°, −4°], joint 6 ∈ [135°, 215°] in the
baselines' (menagerie) convention), joints 3, 5 and 7 are held at 0, 0 and 83° (menagerie), and
``a[4] > 0`` closes the gripper (target 0), ``a[4] <= 0`` opens it (0.04 per finger). The kitchen model's
link 6 and link 7 frames differ from the menagerie model's by a turn about their joint axes: its joint 6 is
the menagerie's minus 1.57 rad and its joint 7 the menagerie's minus 0.7854 rad (checked against the
baselines' XML by forward kinematics to 2e-3 rad), and the targets above are converted accordingly.
Changes to the vendored model, made on the spec: the visual geoms and meshes are removed; joint 4's
range becomes the Panda's [−3.0718, −0.0698] (the kitchen file stops it at −0.4) and joint 6's the Panda's
[−0.0175, 3.7525] (menagerie convention), so that the baselines' targets are reachable; the arm's bodies
are gravity-compensated (``gravcomp = 1``, as the Panda's own controller does), so the position actuators
(kp 870 for joints 1–4, 120 for 5–7, force limits 87 and 12, joint damping 100 and 10) hold their targets
without sag. Joint speeds are limited by force limit / damping to ≈0.87 rad/s (joints 1–4) and ≈1.2 rad/s
(5–7), slower than the baselines' stiffer menagerie actuators: a full sweep of joint 1 takes ≈3 s of the
12.5 s episode.

Time: 0.002 s physics step, 25 substeps per environment step (0.05 s, the baselines' ``n_frames = 25``),
implicit-fast integration (the baselines' XML); 250 steps per episode, truncated only, reward 0.

Observation (18 float32, the baselines' layout with the kitchen model's quantities):
``[0:3]`` cube position (x, y, z), ``[3:10]`` arm joint angles 1–7, ``[10:13]`` end-effector position (the
kitchen model's ``end_effector`` site, between the fingertips), ``[13:16]`` its linear velocity,
``[16]`` gripper opening (sum of the two finger joints, 0 to 0.08 m), ``[17]`` gripper force (mean of the two
finger actuators' forces × 0.1, computed from the state). Goal projection: the cube's (x, y), indices 0 and 1.
"""

from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from sun_lightning.envs.eval_goals import EvalGoals, grid_points, register_eval_goals
from sun_lightning.envs.mujoco_vec import NO_HORIZON, MujocoSingleEnv, MujocoVectorEnv, check_actions
from sun_lightning.envs.registry import GoalSpace, register

ENV_ID = "sun_lightning/ArmPushH-v0"
NAME = "ArmPushH"
HORIZON = 250
TIMESTEP = 0.002
FRAME_SKIP = 25  # 0.05 s per environment step
ACTION_DIM = 5

CUBE_HALF = 0.03
CUBE_MASS = 0.216  # the baselines' 6 cm box at MuJoCo's default density 1000
CUBE_LOW = (-0.45, 0.60)  # spawn box of the cube's (x, y), SPEC §6
CUBE_HIGH = (-0.35, 0.70)
CONTACT_TIMECONST = 0.005  # solref of the plane and the cube (MuJoCo's default 0.02)

# The kitchen model's joints 6 and 7 minus the menagerie model's (the baselines'), in radians.
J6_OFFSET, J7_OFFSET = -1.57, -0.7854
# Targets of joints 1, 2, 4, 6 at a = -1 and a = +1 (the baselines' ranges, kitchen convention).
TARGET_LOW = np.array([0.3491, 0.0, -3.0718, 2.3562 + J6_OFFSET])
TARGET_HIGH = np.array([2.7925, 1.48353, -0.0698, 3.7525 + J6_OFFSET])
CONTROLLED = (0, 1, 3, 5)  # qpos/ctrl indices of joints 1, 2, 4, 6
HELD = {2: 0.0, 4: 0.0, 6: 1.4487 + J7_OFFSET}  # joints 3, 5, 7
FINGER_OPEN = 0.04
# The baselines' start pose (arm_push_hard.py: arm_q_default), fingers open.
HOME = np.array([1.571, 0.742, 0.0, -1.571, 0.0, 3.054 + J6_OFFSET, 1.449 + J7_OFFSET, FINGER_OPEN, FINGER_OPEN])
JOINT4_RANGE = (-3.0718, -0.0698)
JOINT6_RANGE = (-0.0175 + J6_OFFSET, 3.7525 + J6_OFFSET)

OBS_DIM = 18
GOAL_DIMS = (0, 1)
OBS_CUBE, OBS_JOINTS, OBS_EE, OBS_EE_VEL, OBS_GRIP, OBS_FORCE = (
    slice(0, 3), slice(3, 10), slice(10, 13), slice(13, 16), 16, 17)
# Coverage box of the cube's (x, y): the end-effector's reach at table height (z < 0.08) over all targets
# is x ∈ [-0.85, 0.85], y ∈ [-0.26, 0.91] (≤ 0.905 m from the base); plus the cube's half-diagonal and a margin.
METRIC_LOW = (-1.0, -0.4)
METRIC_HIGH = (1.0, 1.0)
RHO = 0.01
REACH = 0.1

# Evaluation goals: cube positions on a 0.15 m grid within the arm's pushing reach: 0.3–0.85 m from
# the base (inside 0.3 m the links stand) and joint 1's baseline range of base angles, 20°–160°.
EVAL_STEP, EVAL_RADIUS, EVAL_ANGLE = 0.15, (0.3, 0.85), (20.0, 160.0)

ARM_NQ = 9  # arm joints 1-7 and the two fingers lead qpos, qvel and ctrl
CUBE_QPOS = slice(9, 16)  # the cube's free joint: position, quaternion


def asset_dir() -> Path:
    return Path(str(resources.files("sun_lightning.envs") / "assets" / "franka"))


def scene_spec() -> mujoco.MjSpec:
    """The ArmPush-H scene as an :class:`mujoco.MjSpec`: vendored Panda, table plane, cube (see the module doc)."""
    spec = mujoco.MjSpec.from_file(str(asset_dir() / "panda.xml"))
    for geom in list(spec.geoms):
        if geom.classname.name == "panda_viz":
            spec.delete(geom)
    for mesh in list(spec.meshes):
        if mesh.name.endswith("_viz"):
            spec.delete(mesh)
    spec.option.timestep = TIMESTEP
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for geom in spec.geoms:
        if geom.classname.name == "panda_col":  # link meshes: only the hand collides (fingers keep their class)
            geom.contype = geom.conaffinity = int(geom.meshname == "hand_col")
    for body in spec.bodies:
        if body.name.startswith("panda0_"):
            body.gravcomp = 1.0
    spec.joint("robot:panda0_joint4").range = list(JOINT4_RANGE)
    spec.joint("robot:panda0_joint6").range = list(JOINT6_RANGE)
    spec.actuator("panda0_joint4").ctrlrange = list(JOINT4_RANGE)
    spec.actuator("panda0_joint6").ctrlrange = list(JOINT6_RANGE)
    world = spec.worldbody
    # Stiffer contacts than MuJoCo's default for the plane and the cube (see the module doc).
    world.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], rgba=[0.2, 0.3, 0.4, 1],
                   solref=[CONTACT_TIMECONST, 1])
    world.add_light(pos=[0, 0, 3], dir=[0, 0, -1])
    cube = world.add_body(name="cube", pos=[np.mean([CUBE_LOW[0], CUBE_HIGH[0]]), np.mean([CUBE_LOW[1], CUBE_HIGH[1]]),
                                            CUBE_HALF])
    cube.add_freejoint(name="cube")
    # Explicit inertia: the vendored compiler settings take inertia from geom groups 3-5 only.
    cube.explicitinertial = True
    cube.mass = CUBE_MASS
    cube.ipos, cube.iquat = [0, 0, 0], [1, 0, 0, 0]
    cube.inertia = [CUBE_MASS * (2 * CUBE_HALF) ** 2 / 6] * 3
    cube.add_geom(name="cube", type=mujoco.mjtGeom.mjGEOM_BOX, size=[CUBE_HALF] * 3, rgba=[0, 0.4, 0, 1],
                  solref=[CONTACT_TIMECONST, 1])
    spec.add_key(name="home", qpos=list(HOME) + [*cube.pos, 1, 0, 0, 0], ctrl=list(HOME))
    return spec


def build_model() -> mujoco.MjModel:
    """A freshly compiled ArmPush-H model (about 10 ms)."""
    model = scene_spec().compile()
    if (model.nq, model.nv, model.nu) != (16, 15, ARM_NQ):
        raise ValueError(f"the vendored Franka model changed: nq={model.nq}, nv={model.nv}, nu={model.nu}")
    return model


@functools.cache
def arm_push_model() -> mujoco.MjModel:
    """The model, compiled once; vector envs hand copies of it to their worlds (do not edit it)."""
    return build_model()


def actions_to_ctrl(actions: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Actuator targets ``[..., 9]`` of actions ``[..., 5]`` in ``[-1, 1]`` (the baselines' joint-angle control)."""
    a = np.clip(actions, -1.0, 1.0)
    ctrl = np.empty(a.shape[:-1] + (ARM_NQ,)) if out is None else out
    targets = (TARGET_LOW + TARGET_HIGH) / 2 + a[..., :4] * ((TARGET_HIGH - TARGET_LOW) / 2)
    ctrl[..., list(CONTROLLED)] = np.clip(targets, TARGET_LOW, TARGET_HIGH)  # a = ±1 hits the ends exactly
    for joint, angle in HELD.items():
        ctrl[..., joint] = angle
    ctrl[..., 7:9] = np.where(a[..., 4:5] > 0, 0.0, FINGER_OPEN)
    return ctrl


class Observer:
    """The observation of a model's worlds from MjData fields stacked ``[n, ...]`` (position and velocity stages current).

    Args:
        model: an ArmPush-H model (its ids and finger actuator gains are read once).
    """

    STATE = ("qpos", "qvel", "ctrl")
    DERIVED = ("site_xpos", "cvel", "subtree_com")  # current after mj_fwdPosition and mj_fwdVelocity
    FIELDS = STATE + DERIVED

    def __init__(self, model: mujoco.MjModel) -> None:
        self.site = model.site("end_effector").id
        self.body = int(model.site_bodyid[self.site])
        self.root = int(model.body_rootid[self.body])
        fingers = [model.actuator(n).id for n in ("r_gripper_finger_joint", "l_gripper_finger_joint")]
        self.finger_ctrl = fingers
        self.finger_qpos = [int(model.jnt_qposadr[model.actuator_trnid[i, 0]]) for i in fingers]
        self.finger_kp = model.actuator_gainprm[fingers, 0].copy()
        # The gripper force below is kp (ctrl - q) clipped: position actuators on the finger joints, no kv.
        if not (np.array_equal(model.actuator_biasprm[fingers, :3], np.c_[[0.0, 0.0], -self.finger_kp, [0.0, 0.0]])
                and (model.actuator_gear[fingers, 0] == 1).all()):
            raise ValueError("the vendored Franka's finger actuators changed: not plain position actuators")
        self.finger_force = model.actuator_forcerange[fingers].copy()

    def __call__(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, site_xpos: np.ndarray,
                 cvel: np.ndarray, subtree_com: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        n = qpos.shape[0]
        obs = np.empty((n, OBS_DIM), dtype=np.float32) if out is None else out
        obs[:, OBS_CUBE] = qpos[:, CUBE_QPOS.start:CUBE_QPOS.start + 3]
        obs[:, OBS_JOINTS] = qpos[:, :7]
        ee = site_xpos[:, self.site]
        obs[:, OBS_EE] = ee
        # mj_objectVelocity's translation: cvel is the body's (rotation, translation) at its tree's subtree com.
        w, v, r = cvel[:, self.body, :3], cvel[:, self.body, 3:], ee - subtree_com[:, self.root]
        obs[:, OBS_EE_VEL] = v + w[:, [1, 2, 0]] * r[:, [2, 0, 1]] - w[:, [2, 0, 1]] * r[:, [1, 2, 0]]  # v + w × r
        finger = qpos[:, self.finger_qpos]
        obs[:, OBS_GRIP] = finger.sum(-1)
        force = np.clip(self.finger_kp * (ctrl[:, self.finger_ctrl] - finger), self.finger_force[:, 0],
                        self.finger_force[:, 1])
        obs[:, OBS_FORCE] = 0.1 * force.mean(-1)
        return obs

    def of_data(self, data: mujoco.MjData) -> np.ndarray:
        """``[18]`` observation of one MjData."""
        fields = [np.asarray(getattr(data, name))[None] for name in self.FIELDS]
        return self(*fields)[0]


def cube_starts(n: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, 2]`` cube (x, y) uniform in the spawn box."""
    return rng.uniform(CUBE_LOW, CUBE_HIGH, size=(n, 2))


def initial_state(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(qpos [n, 16], qvel [n, 15], ctrl [n, 9])`` of ``n`` fresh episodes: the arm at rest in the home pose
    holding it, the cube at rest on the plane, unrotated, at a uniform point of the spawn box."""
    qpos = np.zeros((n, 16))
    qpos[:, :ARM_NQ] = HOME
    qpos[:, 9:11] = cube_starts(n, rng)
    qpos[:, 11] = CUBE_HALF
    qpos[:, 12] = 1.0
    return qpos, np.zeros((n, 15)), np.tile(HOME, (n, 1))


def _spaces() -> tuple[spaces.Box, spaces.Box]:
    obs = spaces.Box(-np.inf, np.inf, shape=(OBS_DIM,), dtype=np.float32)
    return obs, spaces.Box(-1.0, 1.0, shape=(ACTION_DIM,), dtype=np.float32)


class ArmPushVectorEnv(MujocoVectorEnv):
    """``num_envs`` ArmPush-H worlds stepped in one threaded :class:`mujoco.batch.Batch` call (SPEC §6).

    Resets, horizons, autoreset, seeding and the restore of a diverged world are
    :class:`~sun_lightning.envs.mujoco_vec.MujocoVectorEnv`'s; this class supplies the model, the start
    distribution (:func:`initial_state`), the observation (:class:`Observer`, from the position and velocity
    stages that the batch computes at the new state) and the map from the 5-dim actions to the 9 actuator
    targets (:func:`actions_to_ctrl`).

    Args:
        num_envs: number of worlds.
        max_episode_steps: horizon (250 when ``None``).
        autoreset_mode: ``SAME_STEP`` or ``DISABLED`` (an ``AutoresetMode`` or its value).
        num_threads: threads of the batch; ``None`` for ``min(num_envs, available CPUs)``.
    """

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
                 num_threads: int | None = None) -> None:
        model = arm_push_model()
        obs_space, action_space = _spaces()
        # MujocoVectorEnv writes its actions to ctrl as they are: it gets the actuator targets, checked against
        # the actuators' ranges, and the 5-dim action space replaces that space once it is built.
        ctrl_space = spaces.Box(model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1], dtype=np.float64)
        super().__init__(model, name=NAME, single_observation_space=obs_space, single_action_space=ctrl_space,
                         horizon=HORIZON, frame_skip=FRAME_SKIP, num_envs=num_envs,
                         max_episode_steps=max_episode_steps, autoreset_mode=autoreset_mode,
                         num_threads=num_threads, observe_stage=mujoco.mjtStage.mjSTAGE_VEL)
        self.single_action_space = action_space
        self.action_space = batch_space(action_space, num_envs)
        self.observer = Observer(model)
        # Derived fields are copied out of the batch after every call once bound: bind them before the first.
        self._derived = [self.batch.bind(field) for field in Observer.DERIVED]

    def sample_state(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        qpos, qvel, ctrl = initial_state(n, rng)
        return {"qpos": qpos, "qvel": qvel, "ctrl": ctrl}

    def observe(self) -> np.ndarray:
        return self.observer(self.qpos, self.qvel, self.ctrl, *self._derived)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = check_actions(actions, (self.num_envs, ACTION_DIM), -1.0, 1.0, self.name)
        return super().step(actions_to_ctrl(a))


class ArmPushEnv(MujocoSingleEnv):
    """One ArmPush-H world (SPEC §6); build it with :func:`gymnasium.make`, whose ``TimeLimit`` sets the horizon."""

    def __init__(self) -> None:
        super().__init__(ArmPushVectorEnv(num_envs=1, max_episode_steps=NO_HORIZON,
                                          autoreset_mode=AutoresetMode.DISABLED, num_threads=1))


def eval_goals() -> EvalGoals:
    """The evaluation goals of ArmPush-H: a grid of cube (x, y) positions on the reachable table (36 goals)."""
    xs = np.arange(-5, 6) * EVAL_STEP
    ys = np.arange(1, 7) * EVAL_STEP
    points = grid_points([xs.tolist(), ys.tolist()])
    radius = points.norm(dim=1)
    angle = torch.rad2deg(torch.atan2(points[:, 1], points[:, 0]))
    keep = (radius >= EVAL_RADIUS[0]) & (radius <= EVAL_RADIUS[1]) & (angle >= EVAL_ANGLE[0]) & (angle <= EVAL_ANGLE[1])
    return EvalGoals(points[keep])


def _register() -> None:
    """Register ArmPush-H: g_s = the cube's (x, y) on an unbounded plane, reached within distance 0.1, ρ = 0.01."""
    module = "sun_lightning.envs.arm_push"  # not __name__, which is "__main__" under ``python -m``
    register(
        ENV_ID,
        GoalSpace(obs_dim=OBS_DIM, num_actions=0, action_dim=ACTION_DIM, goal_dims=GOAL_DIMS,
                  low=(-math.inf, -math.inf), high=(math.inf, math.inf), rho=RHO, reach="distance", eta=REACH,
                  metric_low=METRIC_LOW, metric_high=METRIC_HIGH),
        entry_point=f"{module}:ArmPushEnv",
        vector_entry_point=f"{module}:ArmPushVectorEnv",
        max_episode_steps=HORIZON,
    )
    register_eval_goals(ENV_ID, eval_goals)


_register()
