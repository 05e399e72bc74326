"""Recording one collected vector step (SPEC §4, §7): into D, its counts, the learner's running statistics, the
window's goal statistics and the events."""

from __future__ import annotations

from tensordict import TensorDictBase

from sun_lightning import keys
from sun_lightning.exploration.distributed import all_gather, gather_step
from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.stats import GOAL_VIEW, flat_step


def record(x: Exploration, step: TensorDictBase) -> None:
    """Write one collected vector step ``[B]`` into D, count its entries' pseudocounts, feed the learner's running
    statistics, the window's goal statistics and the ``goals`` event, count its frames and emit ``frames``."""
    flat = flat_step(step)
    if x.world_size > 1:  # every rank's step, in rank order: one D and one pseudocount for the job
        flat = gather_step(flat, all_gather, x.gather_device)
    x.replay.extend(flat)
    x.agent.observe(flat[keys.OBS])
    x.window.update(flat)
    if x.events.heard("goals") and keys.GOAL_SELECTED in flat:
        # Before ``frames``, so that what its listeners report at a frame count includes this step's goals.
        if bool((flat[keys.GOAL_SELECTED] | flat[keys.GOAL_REACHED]).any()):
            x.events.emit("goals", {name: flat[name] for name in GOAL_VIEW})
    x.frames += len(flat[keys.EPISODE_END])
    x.events.emit("frames", x.frames)
