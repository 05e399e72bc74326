"""The global random number generators' state, saved in checkpoints and around evaluations (exact resume)."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import torch

from sun_lightning.checkpoints import safe_pickle


def rng_state() -> dict[str, Any]:
    """The global RNGs' states (torch CPU and CUDA, numpy, Python)."""
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": pickle.dumps(np.random.get_state()),
            "python": pickle.dumps(random.getstate())}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(safe_pickle.loads(state["numpy"]))
    random.setstate(safe_pickle.loads(state["python"]))
