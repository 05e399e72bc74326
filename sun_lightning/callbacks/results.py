"""Pictures of a run for MLflow: heatmaps at 25/50/75/100 % of training and the exploration curves (SPEC §7).

Plotting stays out of the training step: the snapshots are taken on the loop's ``frames`` event when the run
passes each fraction of its frame budget, and the goals they show come from its ``goals`` event
(:mod:`sun_lightning.exploration.events`).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import lightning.pytorch as pl
import torch

from sun_lightning import keys
from sun_lightning.exploration.view import RunView, run_view
from sun_lightning.tracking.logger import SUNMLFlowLogger
from sun_lightning.results.curves import CURVES, run_curves_figure
from sun_lightning.results.goal_grid import GoalGrid
from sun_lightning.results.heatmaps import save_png, snapshot_figure
from sun_lightning.results.runs import HEATMAP_DIR, STOP_SUFFIX
from sun_lightning.results.snapshot import take_snapshot


class ResultsLogger(pl.Callback):
    """Logs heatmaps during training and the curves at the end, as artifacts of every MLflow logger.

    Artifacts:

    - ``heatmaps/heatmaps_<pct>.png`` at each fraction of ``data.total_frames`` (``025``, ``050``,
      ``075``, ``100``): visits in D (log-scale counts), goals selected and reached since the previous
      snapshot, V(s₀, g) and the selection rule's score from a start state s₀, and where the run evaluates goal
      reaching (``eval``), the latest evaluation's success per goal
      (:mod:`sun_lightning.results.snapshot`), over the gridworld's tiles or the first two goal dimensions;
      ``heatmaps/heatmaps_<pct>.npz``: the same numbers, for the comparison report. A run that stops before its
      budget (``max_steps``, an interruption) adds ``heatmaps_<pct>_stop`` where it stopped; once it resumes past
      that point, reports read its scheduled snapshots only (:func:`~sun_lightning.results.runs.load_snapshots`).
    - ``curves.png`` at the end: coverage and entropy (and k-NN entropy where logged) against env frames,
      as logged by :class:`~sun_lightning.callbacks.exploration.ExplorationLogger`.

    Without an MLflow logger (``--trainer.logger false``) it does nothing, and costs nothing. Artifacts go through
    :class:`~sun_lightning.tracking.logger.SUNMLFlowLogger`, so a store that fails mid-run does not stop the run.

    Args:
        fractions: fractions of the frame budget at which heatmaps are taken (each in (0, 1]).
    """

    def __init__(self, fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)) -> None:
        if not fractions or any(not 0 < f <= 1 for f in fractions):
            raise ValueError(f"fractions must lie in (0, 1], got {fractions}")
        self.fractions = sorted(set(fractions))
        self._loggers: list[SUNMLFlowLogger] = []
        self._title: str | None = None
        self._run: RunView | None = None
        self._selected: list[torch.Tensor] = []
        self._reached: list[torch.Tensor] = []

    # ---- wiring ------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._loggers = [logger for logger in trainer.loggers if isinstance(logger, SUNMLFlowLogger)]
        if not self._loggers or not trainer.is_global_zero:
            self._loggers = []
            return
        self._trainer, self._module, run = trainer, pl_module, run_view(trainer)
        self._run, self._grid = run, GoalGrid.of(run.config.env_id)
        self._due = [(math.ceil(f * run.config.total_frames), round(100 * f)) for f in self.fractions]
        self._selected: list[torch.Tensor] = []
        self._reached: list[torch.Tensor] = []
        run.events.subscribe("goals", self._on_goals)
        run.events.subscribe("frames", self._on_frames)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._loggers:
            # A resumed run (its frames restored by now) took the snapshots due before its checkpoint already.
            self._due = [(frames, percent) for frames, percent in self._due if frames > self._run.frames]

    def state_dict(self) -> dict:
        # The goals since the last snapshot, so that a resumed run's next snapshot shows those of the whole window,
        # as the uninterrupted run's does.
        return {"selected": _joined(self._selected), "reached": _joined(self._reached)}

    def load_state_dict(self, state_dict: dict) -> None:
        self._selected = [state_dict["selected"]] if state_dict.get("selected") is not None else []
        self._reached = [state_dict["reached"]] if state_dict.get("reached") is not None else []

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._run is not None:
            self._run.events.unsubscribe("goals", self._on_goals)
            self._run.events.unsubscribe("frames", self._on_frames)

    def _on_goals(self, goals: dict[str, torch.Tensor]) -> None:
        """Keep the goals selected and reached at this step (:data:`~sun_lightning.exploration.stats.GOAL_VIEW`)."""
        goal = goals[keys.GOAL]
        self._selected.append(goal[goals[keys.GOAL_SELECTED]])
        self._reached.append(goal[goals[keys.GOAL_REACHED]])

    def _on_frames(self, frames: int) -> None:
        while self._due and frames >= self._due[0][0]:
            self.log_heatmaps(frames, self._due.pop(0)[1])

    # ---- what is logged --------------------------------------------------------------------------
    def log_heatmaps(self, frames: int, percent: int, suffix: str = "") -> None:
        """Take a snapshot now and log its picture and numbers (``heatmaps_<percent><suffix>``); the goal window
        starts afresh."""
        evaluation = next((cb for cb in self._trainer.callbacks if getattr(cb, "latest", None) is not None), None)
        run = self._run
        snapshot = take_snapshot(self._module, self._grid, self._selected, self._reached, frames, percent,
                                 env_id=run.config.env_id, storage=run.storage, pseudocount=run.pseudocount,
                                 space=run.goal_space, selector=run.config.selector,
                                 evaluation=evaluation and evaluation.latest,
                                 eval_frames=getattr(evaluation, "latest_frames", -1))
        self._selected, self._reached = [], []
        with tempfile.TemporaryDirectory() as tmp:
            stem = Path(tmp) / f"heatmaps_{percent:03d}{suffix}"
            snapshot.save(stem.with_suffix(".npz"))
            save_png(snapshot_figure(self._grid, snapshot, self._run_title()), stem.with_suffix(".png"))
            self._log_files(tmp, HEATMAP_DIR)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._loggers:
            return
        frames = self._run.frames
        if self._due and frames > 0:
            # The run stopped before its budget (max_steps, an interruption): a last snapshot where it stopped.
            self.log_heatmaps(frames, round(100 * frames / self._run.config.total_frames), STOP_SUFFIX)
            self._due = []
        logger = self._loggers[0]
        histories = {}
        for name in CURVES:
            history = logger.metric_history(name)
            histories[name] = ([s for s, _ in history], [v for _, v in history])
        with tempfile.TemporaryDirectory() as tmp:
            save_png(run_curves_figure(histories, self._run_title()), Path(tmp) / "curves.png")
            self._log_files(tmp, None)

    def _run_title(self) -> str:
        if self._title is None:
            self._title = self._loggers[0].run_name
        return self._title

    def _log_files(self, folder: str, artifact_path: str | None) -> None:
        for logger in self._loggers:
            logger.log_artifacts(folder, artifact_path)


def _joined(window: list[torch.Tensor]) -> torch.Tensor | None:
    """A goal window as one tensor (``None``: empty), so that a checkpoint holds one tensor, not one per step."""
    return torch.cat(window) if window else None
