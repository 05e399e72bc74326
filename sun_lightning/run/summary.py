"""The lines a run ends with: its metrics, its MLflow run, its checkpoint and the ``mlflow ui`` command."""

from __future__ import annotations

from pathlib import Path

from sun_lightning.callbacks.exploration import ExplorationLogger
from sun_lightning.exploration.view import run_view
from sun_lightning.tracking.logger import SUNMLFlowLogger

#: The metrics the summary shows, in order (all of them are in MLflow).
SUMMARY_METRICS = ("explore/visits/coverage", "explore/visits/entropy", "explore/visits/knn_entropy",
                   "explore/goals/success", "train/loss/td")


def run_summary(trainer, folder_line: str | None = None) -> str:
    """A few lines for the end of a run: metrics, MLflow run, checkpoint (and ``folder_line`` where the run got a
    folder of its own beside an earlier run's), and the ``mlflow ui`` command."""
    run = run_view(trainer)
    final = next((cb.final for cb in trainer.callbacks if isinstance(cb, ExplorationLogger)), {})
    shown = "  ".join(f"{name.rsplit('/', 1)[-1]}={final[name]:.4f}" for name in SUMMARY_METRICS if name in final)
    stopper = next((cb for cb in trainer.callbacks if getattr(cb, "interrupted", False)), None)
    ended = f"stopped ({stopper.stop_name})" if stopper is not None else "done"
    lines = [f"{ended}: {run.frames} env frames of {run.config.env_id}  {shown}"]
    for logger in trainer.loggers:
        if isinstance(logger, SUNMLFlowLogger):  # its lines survive a store that failed during the run
            lines.extend(logger.summary_lines())
    checkpoint = trainer.checkpoint_callback
    if checkpoint is not None and getattr(checkpoint, "last_model_path", ""):
        lines.append(f"checkpoint: {Path(checkpoint.last_model_path).resolve()}  "
                     f"(continue or resume: --ckpt_path {checkpoint.last_model_path})")
        if folder_line:
            lines.append(folder_line)
    return "\n".join(lines)
