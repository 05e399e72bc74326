"""A callback for DDP tests and benches: each rank writes what it holds at the end of ``fit``.

Run with ``--trainer.callbacks+=ddp_probe.DumpState`` and ``SUN_DDP_PROBE=<folder>`` (this folder on
``PYTHONPATH``, so that every process Lightning launches imports it): ``<folder>/rank<r>.pt`` gets the
learner's parameters, D's entries and every entry's pseudocount, the frame and update counters, the
local steps this rank collected before the all-gather, and the wall-clock time of the run after the
warm-up (for the bench).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

import sun_lightning.exploration.recorder
from sun_lightning.replay.storage import STORED_KEYS

_gather = sun_lightning.exploration.recorder.gather_step
LOCAL_STEPS: list[dict[str, torch.Tensor]] = []


def _recording_gather(step, *args, **kwargs):
    LOCAL_STEPS.append({name: step[name].clone() for name in STORED_KEYS})
    return _gather(step, *args, **kwargs)


class DumpState(pl.Callback):
    def setup(self, trainer, pl_module, stage):
        sun_lightning.exploration.recorder.gather_step = _recording_gather
        self.exploration, self.module = trainer.datamodule.exploration, pl_module
        self.exploration.events.subscribe("frames", self._on_frames)
        self.started = None

    def _on_frames(self, frames):
        if self.started is None and frames > self.exploration.config.warmup_frames:
            self.started, self.start_frames, self.start_updates = time.perf_counter(), frames, self.module.updates

    def on_fit_end(self, trainer, pl_module):
        run = self.exploration
        logger = next((cb for cb in trainer.callbacks if type(cb).__name__ == "ExplorationLogger"), None)
        held = len(run.storage)
        index = torch.arange(held, device=run.storage.device)
        state = {
            "rank": trainer.global_rank, "world_size": trainer.world_size,
            "params": {name: value.detach().cpu().clone() for name, value in pl_module.state_dict().items()},
            "storage": {name: run.storage.columns.get(name)[:held].cpu().clone() for name in STORED_KEYS},
            "counts": run.pseudocount.counts(index).cpu().clone(),
            "frames": run.frames, "updates": pl_module.updates, "final": dict(logger.final) if logger else {},
            "local_steps": LOCAL_STEPS,
            "seconds": time.perf_counter() - self.started if self.started else None,
            "timed_frames": run.frames - self.start_frames if self.started else 0,
            "timed_updates": pl_module.updates - self.start_updates if self.started else 0,
        }
        folder = Path(os.environ["SUN_DDP_PROBE"])
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(state, folder / f"rank{trainer.global_rank}.pt")
