"""Command line: ``python -m sun_lightning fit --config conf/<env>.yaml`` (LightningCLI).

Configuration is the constructors' signatures: ``model`` is an
:class:`~sun_lightning.learners.base.Learner` subclass (the DQN variant for
discrete actions), ``data`` the :class:`~sun_lightning.data.ExplorationDataModule`
(environment, selection rule, replay) and ``metrics`` the
:class:`~callbacks.exploration.ExplorationLogger`. Runs are tracked with an
embedded MLflow store under ``mlruns/`` by default.
"""

from __future__ import annotations

import os

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import MLFlowLogger

from callbacks.exploration import ExplorationLogger
from sun_lightning.data import ExplorationDataModule
from sun_lightning.learners.base import Learner
from sun_lightning.runtime import tune_allocator
from sun_lightning.tracking import MLFLOW_DIR, MLFLOW_URI, prepare_store


class MLflowSaveConfig(SaveConfigCallback):
    """Logs the resolved config as an MLflow artifact (``config.yaml``) and as flat params.

    Lightning's default callback writes into the logger's ``save_dir``, which
    an MLflow logger on a sqlite store does not have.
    """

    def save_config(self, trainer, pl_module, stage: str) -> None:
        text = self.parser.dump(self.config, skip_none=False)
        params = _flatten(self.config.as_dict())
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                logger.experiment.log_text(logger.run_id, text, "config.yaml")
            logger.log_hyperparams(params)


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, key + "."))
        elif name not in ("config",):
            flat[key] = str(value)
    return flat


class SUNCLI(LightningCLI):
    """LightningCLI with the goal-space link, the metrics callback and MLflow defaults."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ExplorationLogger, "metrics")
        # The learner gets dimensions and action set from the environment's
        # registration through the DataModule, never the environment itself.
        parser.link_arguments("data", "model.init_args.goal_space", compute_fn=lambda dm: dm.goal_space, apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        MLFLOW_DIR.mkdir(exist_ok=True)
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        logger = config.get("trainer", {}).get("logger") if config is not None else None
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith("MLFlowLogger"):
            args = logger.get("init_args") or Namespace()
            prepare_store(args.get("tracking_uri") or MLFLOW_URI, args.get("experiment_name") or "lightning_logs",
                          args.get("artifact_location"))


def main(args: list[str] | None = None, run: bool = True) -> SUNCLI:
    """Entry point of ``python -m sun_lightning``."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    tune_allocator()
    return SUNCLI(
        model_class=Learner,
        datamodule_class=ExplorationDataModule,
        subclass_mode_model=True,
        save_config_callback=MLflowSaveConfig,
        save_config_kwargs={"save_to_log_dir": False, "overwrite": True},
        seed_everything_default=0,
        trainer_defaults={
            "max_epochs": 1,
            "num_sanity_val_steps": 0,
            # Progress is printed by the metrics callback in env frames.
            "enable_progress_bar": False,
            "default_root_dir": "checkpoints",
            "logger": {
                "class_path": "lightning.pytorch.loggers.MLFlowLogger",
                "init_args": {"experiment_name": "sun_lightning", "tracking_uri": MLFLOW_URI},
            },
        },
        args=args,
        run=run,
    )
