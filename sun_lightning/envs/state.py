"""A vector environment's whole state as bytes, for checkpoints that resume exactly.

The package's own vector envs (gridworlds, point mazes) and gymnasium's ``SyncVectorEnv`` over
classic-control envs are plain Python and numpy (or torch) objects: their attributes pickle, RNGs and
step counters included, and loading them back into the same object continues every episode where it
was. An env that keeps state outside Python (the MuJoCo envs' batched worlds) provides
``get_state() -> bytes`` and ``set_state(bytes)`` itself. One that can do neither (Box2D's
LunarLander) has no saved state: :func:`env_state` returns ``None`` and a resumed run restarts its
episodes.
"""

from __future__ import annotations

import pickle
from typing import Any

from sun_lightning.checkpoints import safe_pickle

#: Attributes that are construction recipes, not state (SyncVectorEnv's env factories are closures).
_NOT_STATE = ("env_fns",)


def env_state(env: Any) -> bytes | None:
    """The state of ``env`` as bytes, or ``None`` if it cannot be saved."""
    if hasattr(env, "get_state"):
        return env.get_state()
    try:
        return pickle.dumps({name: value for name, value in vars(env).items() if name not in _NOT_STATE})
    except (pickle.PicklingError, TypeError, AttributeError, AssertionError, ValueError):
        return None


def load_env_state(env: Any, state: bytes) -> None:
    """Put :func:`env_state`'s bytes back into ``env`` (an env built with the same arguments)."""
    if hasattr(env, "set_state"):
        env.set_state(state)
        return
    vars(env).update(safe_pickle.loads(state))
