"""A vector environment's whole state as bytes, for checkpoints that resume exactly.

The package's own vector envs (gridworlds, point mazes) and gymnasium's ``SyncVectorEnv`` over
classic-control envs are plain Python and numpy (or torch) objects: their attributes pickle, RNGs and
step counters included, and loading them back into the same object continues every episode where it
was. An env that keeps state outside Python (the MuJoCo envs' batched worlds) provides
``get_state() -> bytes`` and ``set_state(bytes)`` itself. One that can do neither (Box2D's
LunarLander) has no saved state: :func:`env_state` returns ``None`` and a resumed run restarts its
episodes.

Two kinds of object in another package's envs (Gymnasium-Robotics' mazes) need more than their attributes:

- an ``EzPickle`` env pickles as its constructor's arguments and unpickles as a *fresh* env (its episode, goal and
  RNG lost): its attributes are saved instead (:func:`_bare`, :func:`_set_vars`);
- MuJoCo's ``MjModel`` and ``MjData`` are C structures of megabytes: they are not saved; the loaded env keeps the
  live env's (built from the same config, found in the same order), each ``MjData`` set to the saved physics
  (``mj_getState``/``mj_setState`` of its integration state: positions, velocities, controls, warm start, time).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
from gymnasium.utils import EzPickle

from sun_lightning.checkpoints import safe_pickle

#: Attributes that are construction recipes, not state (SyncVectorEnv's env factories are closures).
_NOT_STATE = ("env_fns",)
_MUJOCO = "mujoco._structs"


def _bare(cls: type) -> Any:
    """An instance of ``cls`` whose constructor did not run (its attributes come next: :func:`_set_vars`)."""
    return cls.__new__(cls)


def _set_vars(obj: Any, state: dict) -> Any:
    vars(obj).update(state)
    return obj


def _physics(data: Any) -> np.ndarray:
    """An ``MjData``'s integration state (what ``mj_step`` continues from)."""
    import mujoco  # only where an env holds MuJoCo structures, so mujoco is imported already

    values = np.zeros(mujoco.mj_stateSize(data.model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(data.model, data, values, mujoco.mjtState.mjSTATE_INTEGRATION)
    return values


class _StatePickler(pickle.Pickler):
    """Pickles an env's attributes: ``EzPickle`` objects by their attributes, MuJoCo structures by reference (their
    order of appearance) with each ``MjData``'s physics; ``found`` lists those structures in that order."""

    def __init__(self, file) -> None:
        super().__init__(file)  # the default protocol, as pickle.dumps: numpy arrays by _reconstruct
        self.found: list[Any] = []

    def persistent_id(self, obj: Any):
        if type(obj).__module__ != _MUJOCO:
            return None
        if not any(obj is seen for seen in self.found):
            self.found.append(obj)
        index = next(i for i, seen in enumerate(self.found) if seen is obj)
        return ("mujoco", index, _physics(obj) if type(obj).__name__ == "MjData" else None)

    def reducer_override(self, obj: Any):
        if isinstance(obj, EzPickle):
            return _bare, (type(obj),), dict(vars(obj)), None, None, _set_vars
        return NotImplemented


def _dump(env: Any) -> tuple[bytes, list[Any]]:
    buffer = io.BytesIO()
    pickler = _StatePickler(buffer)
    pickler.dump({name: value for name, value in vars(env).items() if name not in _NOT_STATE})
    return buffer.getvalue(), pickler.found


def env_state(env: Any) -> bytes | None:
    """The state of ``env`` as bytes, or ``None`` if it cannot be saved."""
    if hasattr(env, "get_state"):
        return env.get_state()
    try:
        return _dump(env)[0]
    except (pickle.PicklingError, TypeError, AttributeError, AssertionError, ValueError):
        return None


def load_env_state(env: Any, state: bytes) -> None:
    """Put :func:`env_state`'s bytes back into ``env`` (an env built with the same arguments)."""
    if hasattr(env, "set_state"):
        env.set_state(state)
        return
    live: list[Any] = []

    def restore(pid: tuple) -> Any:
        if not live:
            live.extend(_dump(env)[1])  # the live env's MuJoCo structures, in the order the saved ones were met
        _, index, physics = pid
        obj = live[index]
        if physics is not None:
            import mujoco

            mujoco.mj_setState(obj.model, obj, physics, mujoco.mjtState.mjSTATE_INTEGRATION)
        return obj

    vars(env).update(safe_pickle.loads(state, persistent_load=restore))
