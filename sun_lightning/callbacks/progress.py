"""A progress bar that counts env frames, the run's own unit of work.

Lightning's bars count batches; here a batch is one vector step's updates and their number per
run is unknown in advance (the warm-up has none), so the bar follows the DataModule's frame
counter to ``total_frames`` instead, with tqdm's rate and ETA and the latest coverage.
"""

from __future__ import annotations

import sys

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar
from tqdm.auto import tqdm

from sun_lightning.exploration.view import RunView, run_view

COVERAGE = "explore/visits/coverage"


class FrameProgressBar(ProgressBar):
    """Env frames collected out of ``data.total_frames``, frames/s, ETA and the latest coverage.

    Quiet with ``--trainer.enable_progress_bar false`` (the CLI then leaves this callback out), and by
    itself when stderr is not a terminal (CI logs keep the metrics callback's lines instead).

    Args:
        refresh_frames: redraw at most once per this many frames (a vector step is ``num_envs`` frames).
        force: draw even when stderr is not a terminal.
    """

    def __init__(self, refresh_frames: int = 64, force: bool = False) -> None:
        super().__init__()
        if refresh_frames <= 0:
            raise ValueError(f"refresh_frames must be positive, got {refresh_frames}")
        self.refresh_frames, self.force = refresh_frames, force
        self._enabled = True
        self._bar: tqdm | None = None
        self._shown = 0
        self._run: RunView | None = None

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        run = run_view(trainer, required=False)
        if not self._enabled or run is None or not trainer.is_global_zero:
            return
        self._run = run
        self._bar = tqdm(total=run.config.total_frames, initial=run.frames, unit="frame", unit_scale=True,
                         desc="frames", dynamic_ncols=True, file=sys.stderr, leave=True,
                         disable=None if not self.force else False, smoothing=0.1)
        self._shown = run.frames
        run.events.subscribe("frames", self._on_frames)

    def _on_frames(self, frames: int) -> None:
        bar = self._bar
        if bar is None or (frames - self._shown < self.refresh_frames and frames < bar.total):
            return
        coverage = self._coverage()
        if coverage is not None:
            bar.set_postfix_str(f"coverage={coverage:.3f}", refresh=False)
        bar.update(frames - self._shown)
        self._shown = frames

    def _coverage(self) -> float | None:
        for callback in self.trainer.callbacks:
            final = getattr(callback, "final", None)
            if isinstance(final, dict) and COVERAGE in final:
                return final[COVERAGE]
        return None

    def print(self, *args, sep: str = " ", **kwargs) -> None:
        """Print above the bar (the metrics callback's lines), or plainly when there is none."""
        if self._bar is not None and not self._bar.disable:
            self._bar.write(sep.join(map(str, args)), file=sys.stdout)
            sys.stdout.flush()
        else:
            print(*args, sep=sep, flush=True, **kwargs)

    def _close(self) -> None:
        if self._run is not None:
            self._run.events.unsubscribe("frames", self._on_frames)
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()
