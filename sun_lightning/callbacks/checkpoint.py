"""Checkpoints every N env frames, written atomically and verified, named by frames (issues 20, 29).

Lightning's ``ModelCheckpoint`` counts optimizer steps (four per vector step for a TD3 ensemble,
none during the warm-up) and writes a file in place, so a crash mid-write can leave a corrupt
``last.ckpt``. This subclass keeps Lightning's machinery (``--ckpt_path last`` finds ``last.ckpt``
in ``dirpath``) and changes the trigger, the names and the write: each file's size and checksum
are recorded beside it (:mod:`sun_lightning.checkpoints.integrity`), with the run that wrote it
(:mod:`sun_lightning.checkpoints.identity`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger

from sun_lightning.callbacks.schedule import EveryFrames
from sun_lightning.checkpoints import integrity
from sun_lightning.domains import AT_LEAST_ONE, check_arguments
from sun_lightning.errors import NonFiniteLossError, stopped_exit_code
from sun_lightning.exploration.view import RunView, run_view
from sun_lightning.checkpoints.identity import FORMAT, FORMAT_KEY, RUN_KEY, migrate, run_identity
from sun_lightning.checkpoints.integrity import LAST
from sun_lightning.tracking.naming import name_of_run

#: The checkpoint key of the MLflow run id the run logs to.
MLFLOW_RUN_KEY = "sun_mlflow_run_id"
#: The file in the checkpoint folder that names the MLflow run from the start, before the first checkpoint: a run
#: killed before it and launched again with ``--ckpt_path last`` continues the same MLflow run.
MLFLOW_RUN_FILE = "mlflow_run.json"


def mlflow_run_of(path: str | Path) -> str | None:
    """The MLflow run id a checkpoint was logging to (memory-mapped: the replay buffer is not read)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True, mmap=True).get(MLFLOW_RUN_KEY)


class FrameCheckpoint(ModelCheckpoint):
    """Saves ``frames=<N>.ckpt`` and ``last.ckpt`` every ``every_frames`` env frames and at the end.

    A checkpoint holds the networks and optimizers, the learner's counters, and the DataModule's whole
    exploration state (replay, pseudocounts, goals, envs, RNGs), so ``--ckpt_path last`` continues the
    run where it stopped. Each file is written to ``<name>.part``, read back for its size and SHA-256
    (recorded in ``<name>.json``) and renamed, so a crash mid-write leaves the previous file intact;
    ``last.ckpt`` is a copy of the newest ``frames=`` file (one serialization per checkpoint). A non-finite loss (raised before its gradient step) also gets a
    checkpoint, of the last good networks.

    Ctrl-C and SIGTERM (``kill``, systemd, a batch scheduler) stop the run at the next step's end with a checkpoint
    (a second one stops it at once); the run's MLflow run ends KILLED and the process exits :attr:`exit_code`
    (130, 143), never 0, so that a runner or a shell does not take the stopped run for a finished one.

    Args:
        dirpath: folder of the checkpoints; ``None`` gives ``<trainer.default_root_dir>/<run name>``
            (``checkpoints/FourRoomStuck-sun-seed0``), the same on a resumed launch.
        every_frames: period in env frames. The default loses at most a few minutes of work on this
            project's configs (ThreeRoom ≈ 1.5 min, a point maze ≈ 4 min on 2 CPU cores).
        keep: how many ``frames=`` checkpoints to keep besides ``last.ckpt`` (older ones are deleted), at
            least one: the intact one ``--ckpt_path last`` falls back to if ``last.ckpt`` is damaged.
    """

    def __init__(self, dirpath: str | None = None, every_frames: Annotated[int, AT_LEAST_ONE] = 10_000,
                 keep: Annotated[int, AT_LEAST_ONE] = 2) -> None:
        check_arguments(FrameCheckpoint.__init__, {"every_frames": every_frames, "keep": keep})
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=False, enable_version_counter=False)
        self.every_frames, self.keep = every_frames, keep
        self._schedule = EveryFrames(every_frames)
        self._saved: list[str] = []
        self._run: RunView | None = None
        self.interrupted = False  # set by Ctrl-C or SIGTERM (or, under DDP, by another rank's)
        self.stop_signal: int | None = None  # the signal that stopped the run, where this process received it

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.interrupted, self.stop_signal = False, None
        self._trainer_ref = trainer
        run = self._run = run_view(trainer)
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C ends the run between two vector steps, with a checkpoint, instead of inside an update.
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_stop_signal)
        run.events.subscribe("frames", self._on_frames)
        run.events.subscribe("trained", self._on_trained)
        if self.dirpath is None:
            name = name_of_run(run.config.env_id, type(run.config.selector).__name__, run.run_seed)
            self.dirpath = str(Path(trainer.default_root_dir) / name)
        if trainer.is_global_zero:
            for part in integrity.stale_parts(self.dirpath):  # writes a killed run never finished
                part.unlink(missing_ok=True)
            self._name_mlflow_run(trainer)
        super().setup(trainer, pl_module, stage)

    def _name_mlflow_run(self, trainer: pl.Trainer) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                Path(self.dirpath).mkdir(parents=True, exist_ok=True)
                integrity.write_json_atomic(Path(self.dirpath) / MLFLOW_RUN_FILE, {"run_id": logger.run_id})

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After Lightning's own SIGTERM handler (installed once setup is done), which would end the run with a
        # SystemExit of status 0 and no checkpoint: SIGTERM is Ctrl-C's twin here.
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_stop_signal)

    def _on_stop_signal(self, signum, frame) -> None:
        if self.interrupted:  # a second one: stop now
            raise KeyboardInterrupt
        self.interrupted, self.stop_signal = True, signum
        if self._trainer_ref.is_global_zero:
            said = "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"
            print(f"\n{said}: saving a checkpoint and stopping ({self.stop_name} again to stop at once)",
                  file=sys.stderr, flush=True)

    @property
    def stop_name(self) -> str:
        """How the run was stopped, in words: ``Ctrl-C`` or the signal's name (``SIGTERM``)."""
        if self.stop_signal in (None, signal.SIGINT):  # None: a DDP rank that learnt of the stop from another
            return "Ctrl-C"
        return signal.Signals(self.stop_signal).name

    @property
    def exit_code(self) -> int:
        """The process's exit status: 0 for a run that ran to its end, else 128 + the stopping signal."""
        if not self.interrupted:
            return 0
        return stopped_exit_code(self.stop_signal or signal.SIGINT)

    def _on_frames(self, frames: int) -> None:
        # During the warm-up no training step ends; after it, the stop waits for the step's update.
        trainer = self._trainer_ref
        if frames <= self._run.config.warmup_frames and self._stop_now(trainer):
            self.save(trainer)
            trainer.should_stop = True

    def _stop_now(self, trainer: pl.Trainer) -> bool:
        """Whether Ctrl-C asks to stop here; under DDP, whether it reached any rank (all ranks stop at one step)."""
        if trainer.world_size > 1:
            self.interrupted = trainer.strategy.reduce_boolean_decision(self.interrupted, all=False)
        return self.interrupted and not trainer.should_stop

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        previous = getattr(self, "_previous_sigint", None)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
            self._previous_sigint = None
        previous = getattr(self, "_previous_sigterm", None)
        if previous is not None:
            if signal.getsignal(signal.SIGTERM) == self._on_stop_signal:  # Lightning has not put back its own yet
                signal.signal(signal.SIGTERM, previous)
            self._previous_sigterm = None
        self._run.events.unsubscribe("frames", self._on_frames)
        self._run.events.unsubscribe("trained", self._on_trained)

    def _on_trained(self, frames: int) -> None:
        # After a training step's update, before the env steps on (exploration/prefetch.py).
        trainer = self._trainer_ref
        if self._stop_now(trainer):
            self.save(trainer)
            trainer.should_stop = True
        elif self._schedule.tick(frames):
            self.save(trainer)

    # Lightning's own triggers (steps, epochs, validation) are replaced by the loop's events.
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args, **kwargs) -> None:
        pass

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._run.frames != self._last_frames():
            self.save(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, NonFiniteLossError) and self._run is not None:
            exception.frames = self._run.frames
            if exception.applied:  # the networks took the bad step: the last good state is the last one written
                exception.checkpoint = self._saved[-1] if self._saved else None
                return
            self.save(trainer)
            exception.checkpoint = self.last_model_path

    def _last_frames(self) -> int:
        return int(Path(self._saved[-1]).stem.split("=")[1]) if self._saved else -1

    def save(self, trainer: pl.Trainer) -> str:
        """Write ``frames=<N>.ckpt`` and ``last.ckpt`` now; returns the frames checkpoint's path."""
        frames = self._run.frames
        path = os.path.join(self.dirpath, f"frames={frames:09d}.ckpt")
        self._writing = path  # in the list of saved files the checkpoint holds, so a resumed run deletes it in turn
        self._save_checkpoint(trainer, path)
        last = os.path.join(self.dirpath, LAST)
        if trainer.is_global_zero:
            # A copy of the same bytes (not a second serialization, nor a hard link: damage to one file's
            # blocks must leave the other intact), checked against the frames file's record.
            shutil.copyfile(path, last + ".part")
            recorded = integrity.read_sidecar(path)["files"][0]
            copied = integrity.digest(last + ".part")
            if copied["sha256"] != recorded["sha256"]:
                raise OSError(f"copying {path} to {last} changed its bytes (disk error?)")
            integrity.install(last + ".part", last, recorded["run"], copied)
        self.last_model_path = last
        if path not in self._saved:
            self._saved.append(path)
        while len(self._saved) > self.keep:
            old = self._saved.pop(0)
            if trainer.is_global_zero:
                integrity.remove(old)
        return path

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        part = filepath + ".part"
        trainer.save_checkpoint(part, self.save_weights_only)
        if trainer.is_global_zero:
            # read back for its size and checksum, then renamed: atomic on POSIX, readers see old or new
            integrity.install(part, filepath, self._identity(trainer))
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    def _identity(self, trainer: pl.Trainer) -> dict:
        run, config = self._run, self._run.config
        return run_identity(trainer.lightning_module, env_id=config.env_id, selector=type(config.selector).__name__,
                            seed=run.run_seed, frames=run.frames, num_envs=config.num_envs, layout=config.layout)

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        migrate(checkpoint)  # a format-1 checkpoint (before identities were recorded) loads as it is; it gains the fields

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[FORMAT_KEY], checkpoint[RUN_KEY] = FORMAT, self._identity(trainer)
        # A resumed launch continues this MLflow run (the CLI reads it back before creating its logger).
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                checkpoint[MLFLOW_RUN_KEY] = logger.run_id

    def state_dict(self) -> dict:
        state = super().state_dict()
        writing = getattr(self, "_writing", None)
        state.update(next_frames=self._schedule.next, saved=[*self._saved, *([writing] if writing and writing not in self._saved else [])])
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._schedule.next = state_dict.get("next_frames", self._schedule.next)
        self._saved = list(state_dict.get("saved", []))
