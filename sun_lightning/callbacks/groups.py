"""The callback groups of the command line: each a config group whose keys are one callback's constructor arguments
(LightningCLI's ``add_lightning_class_args``).

The one table: the CLI adds the groups from it (:mod:`sun_lightning.run.cli`), the pre-check reads their
signatures from it (:mod:`sun_lightning.run.precheck`), and docs/architecture.md's configuration table is held to it
(``tests/unit/callbacks/test_groups.py``). Class paths are strings so that the pre-check reads them without torch.
"""

from __future__ import annotations

import importlib

#: group → (class path, what it holds), in the order the CLI adds them and checks their domains. ``eval`` comes
#: before ``results``: at a frame where both are due, the success map shows this evaluation.
CALLBACK_GROUPS: dict[str, tuple[str, str]] = {
    "metrics": ("sun_lightning.callbacks.exploration.ExplorationLogger", "logging period (env frames), k-NN entropy"),
    "progress": ("sun_lightning.callbacks.progress.FrameProgressBar", "the env-frame progress bar"),
    "checkpoint": ("sun_lightning.callbacks.checkpoint.FrameCheckpoint",
                   "checkpoint period in env frames, folder, how many to keep"),
    "eval": ("sun_lightning.callbacks.evaluation.GoalEvaluation",
             "goal-reaching evaluation: period in env frames, goals, their number"),
    "results": ("sun_lightning.callbacks.results.ResultsLogger",
                "when heatmaps are taken (`fractions` of the frame budget)"),
}


def callback_class(group: str) -> type:
    """The callback class of ``group`` (imported: torch and Lightning come with it)."""
    module, _, name = CALLBACK_GROUPS[group][0].rpartition(".")
    return getattr(importlib.import_module(module), name)
