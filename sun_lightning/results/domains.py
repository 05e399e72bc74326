"""The paper's families of environments (§5 "Environments": Gridworlds, Classic control, GCRL control) and the one
its averages leave out: LunarLanderFull, whose 8-D goals make binned coverage and entropy degenerate (SPEC §7: the
averaged improvement is over the 13 others; the paper gives its k-NN entropy on its own)."""

from __future__ import annotations

from sun_lightning.tracking.naming import env_name

#: Family → its environments' short names (:func:`~sun_lightning.tracking.naming.env_name`), in the paper's order.
DOMAINS = {"Gridworlds": ("ThreeRoom", "FourRoomStuck", "GridMaze"),
           "Classic control": ("MountainCar", "Pendulum", "Acrobot", "CartPole", "LunarLander", "LunarLanderFull"),
           "GCRL control": ("PointMazeS", "PointMazeH", "AntMazeS", "AntMazeH", "ArmPushH")}
#: Left out of every average over environments, as the paper does.
LEFT_OUT = ("LunarLanderFull",)
#: The paper's DQN environments (Gridworlds and Classic control, LunarLanderFull apart), over which it averages its
#: speed-ups.
DQN_ENVS = tuple(name for family in ("Gridworlds", "Classic control") for name in DOMAINS[family] if name not in LEFT_OUT)
#: The family of an environment the paper does not have (a user's own).
OTHER = "other"


def domain_of(env_id: str) -> str:
    """The family of a registered id (``sun_lightning/GridMaze-v0`` → ``Gridworlds``), :data:`OTHER` if none."""
    name = env_name(env_id)
    return next((family for family, names in DOMAINS.items() if name in names), OTHER)


def averaged(per_env: dict) -> dict:
    """The entries of an env id → value mapping that averages over environments count (:data:`LEFT_OUT` apart)."""
    return {env_id: value for env_id, value in per_env.items() if env_name(env_id) not in LEFT_OUT}
