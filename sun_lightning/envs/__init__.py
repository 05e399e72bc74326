"""Environments of the paper, registered with gymnasium under ``sun_lightning/``.

Importing this package registers every environment (SPEC §6).
"""

from sun_lightning.envs import ant_maze, arm_push, classic, gridworlds, point_maze  # noqa: F401  (registration side effects)
from sun_lightning.envs.registry import GoalSpace, env_ids, goal_space, register

__all__ = ["GoalSpace", "env_ids", "goal_space", "register"]
