"""Which learner family an environment's actions need: the DQN variant learns discrete actions
(SPEC §5a), the TD3 variant a Box (SPEC §5b). A mismatch is one line naming the learner to use."""

from __future__ import annotations

import importlib

from sun_lightning.envs.registry import GoalSpace
from sun_lightning.errors import ConfigError, cannot_act
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.learners.td3 import TD3SVF


def check_family(class_path: str, space: GoalSpace, env_id: str) -> None:
    """Raise a one-line :class:`ConfigError` if the learner ``class_path`` cannot act in ``env_id`` (``space``).

    A class path that does not import is left to LightningCLI's own report.
    """
    module, _, name = str(class_path).rpartition(".")
    try:
        learner = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return
    families = {True: DQNSVF, False: TD3SVF}
    wrong = isinstance(learner, type) and issubclass(learner, families[not space.discrete])
    if wrong:
        size = space.num_actions if space.discrete else space.action_dim
        raise ConfigError(cannot_act(name, env_id, space.discrete, size))
