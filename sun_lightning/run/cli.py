"""Command line: ``python -m sun_lightning fit --config conf/<env>.yaml`` (LightningCLI).

Configuration is the constructors' signatures: ``model`` is an
:class:`~sun_lightning.learners.base.Learner` subclass (the DQN variant for
discrete actions), ``data`` the :class:`~sun_lightning.exploration.datamodule.ExplorationDataModule`
(environment, selection rule, replay: the fields of :class:`~sun_lightning.exploration.config.DataConfig`), ``metrics`` the
:class:`~sun_lightning.callbacks.exploration.ExplorationLogger`, ``eval`` the goal-reaching evaluation
:class:`~sun_lightning.callbacks.evaluation.GoalEvaluation` and ``results`` the
:class:`~sun_lightning.callbacks.results.ResultsLogger` (heatmaps and curves). Runs are tracked with an
embedded MLflow store under ``mlruns/`` by default, named and tagged by
:mod:`sun_lightning.tracking`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.strategies import DDPStrategy

from sun_lightning.callbacks.checkpoint import FrameCheckpoint
from sun_lightning.callbacks.groups import CALLBACK_GROUPS, callback_class
from sun_lightning.callbacks.progress import FrameProgressBar
from sun_lightning.learners import precision
from sun_lightning.checkpoints import run_folders
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.datamodule import ExplorationDataModule
from sun_lightning.exploration.view import run_view
from sun_lightning.envs import env_ids
from sun_lightning.domains import check_config
from sun_lightning.errors import ConfigError, UsageError, check_config_files, config_files
from sun_lightning.learners.base import Learner
from sun_lightning.learners.family import check_family
from sun_lightning.tracking.logger import SUNMLFlowLogger
from sun_lightning.run.resume import check_checkpoint, choose_folder, claim_folder, resumed_note, resumed_run
from sun_lightning.run.runtime import quiet_third_party, tune_allocator
from sun_lightning.run.summary import run_summary
from sun_lightning.tracking.naming import method_of, name_of_run, run_tags
from sun_lightning.tracking.store import MLFLOW_DIR, MLFLOW_URI, config_params, prepare_store, worked_out_bounds


#: The argument the CLI links from the DataModule (the goal space): derived, never a setting of its own.
LINKED_GOAL_SPACE = "model.init_args.goal_space"
#: The run's identity (name and tags): set per run by :class:`SUNCLI`, kept out of params and ``config.yaml``
#: so that a config reused for another seed does not carry the old run's name.
_RUN_IDENTITY = ("trainer.logger.init_args.run_name", "trainer.logger.init_args.tags",
                 "trainer.logger.init_args.run_id", "ckpt_path")


class MLflowSaveConfig(SaveConfigCallback):
    """Logs the run's config to MLflow: the artifact ``config.yaml`` (the resolved config), the config
    as params (each hyperparameter once, under its config path: :func:`~sun_lightning.tracking.config_params`),
    and at the end the artifact ``checkpoint_path.txt`` (the final checkpoint's absolute path).

    Lightning's default callback writes into the logger's ``save_dir``, which
    an MLflow logger on a sqlite store does not have.
    """

    def save_config(self, trainer, pl_module, stage: str) -> None:
        config = self.config.clone()
        for key in _RUN_IDENTITY:
            if config.get(key) is not None:
                config[key] = None
        text = self.parser.dump(config, skip_none=False)
        params = config_params(config.as_dict(), skip={LINKED_GOAL_SPACE, *_RUN_IDENTITY})
        params = worked_out_bounds(params, run_view(trainer).goal_space)  # ``auto`` as the numbers it came to
        for logger in trainer.loggers:
            if isinstance(logger, SUNMLFlowLogger):  # its writes survive a failing store
                logged = logger.logged_params()
                if logged:
                    # A resumed run (MLflow params are write-once): the launch's config goes next to the
                    # first one, and only settings the run did not have yet become params.
                    logger.log_text(text, f"config-resumed-{run_view(trainer).frames}.yaml")
                    params = {key: value for key, value in params.items() if key not in logged}
                else:
                    logger.log_text(text, "config.yaml")
            logger.log_hyperparams(params)

    def on_fit_end(self, trainer, pl_module) -> None:
        checkpoint = trainer.checkpoint_callback
        path = getattr(checkpoint, "last_model_path", "") or getattr(checkpoint, "best_model_path", "")
        if not path or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, SUNMLFlowLogger):
                logger.log_text(str(Path(path).resolve()) + "\n", "checkpoint_path.txt")


PROG = "python -m sun_lightning"
#: The learners a config can name (``model.class_path``), listed by ``--help``.
LEARNERS = ("sun_lightning.learners.dqn.DQNSVF", "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF",
            "sun_lightning.learners.td3.TD3SVF", "sun_lightning.learners.ensemble_td3.EnsembleTD3SVF")


def catalogue() -> str:
    """``--help``'s epilog: every learner and environment a config can name."""
    return ("learners (model.class_path): " + ", ".join(LEARNERS) + "\n"
            "environments (data.env_id): " + ", ".join(env_ids()) + "; or any gymnasium id with its goal space in "
            "data.goal (docs/custom-envs.md)")


class SUNArgumentParser(LightningArgumentParser):
    """Raises :class:`~sun_lightning.errors.UsageError` where jsonargparse would print its usage and exit:
    ``python -m sun_lightning`` reports it in one line (:func:`~sun_lightning.errors.report`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("epilog", catalogue())
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:  # jsonargparse trying an alternative; it handles the ArgumentError itself
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        raise UsageError(message, [option for action in parser._actions for option in action.option_strings])


class SUNCLI(LightningCLI):
    """LightningCLI with the goal-space link, the metrics and results callbacks and MLflow defaults."""

    def add_arguments_to_parser(self, parser) -> None:
        for group in CALLBACK_GROUPS:
            parser.add_lightning_class_args(callback_class(group), group)
        parser.add_argument("--auto_bf16", type=bool, default=False,
                            help="train in bf16-mixed where the device has bf16 matrix units, else 32-true "
                                 "(an explicit --trainer.precision wins); the TD3 configs set it")
        # The learner gets dimensions and action set from the environment's
        # registration through the DataModule, never the environment itself.
        parser.link_arguments("data", LINKED_GOAL_SPACE, compute_fn=self._goal_space, apply_on="instantiate")

    def _goal_space(self, datamodule: ExplorationDataModule):
        """The goal space the learner gets, once its family fits the env's actions (one line if not)."""
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        check_family(config.model.class_path, datamodule.goal_space, datamodule.config.env_id)
        return datamodule.goal_space

    def before_fit(self) -> None:
        for line in (getattr(self, "precision_line", None), getattr(self, "folder_line", None)):
            if line and self.trainer.is_global_zero:
                print(line, flush=True)

    def after_fit(self) -> None:
        """The end-of-run summary: final metrics, where the run, its checkpoint and its results are, and how to look."""
        if not self.trainer.is_global_zero:
            return
        if any(getattr(cb, "interrupted", False) for cb in self.trainer.callbacks):
            for logger in self.trainer.loggers:
                if isinstance(logger, SUNMLFlowLogger):  # stopped by the user, not finished (MLflow's own status)
                    logger.set_status("KILLED")
        print(run_summary(self.trainer, getattr(self, "folder_line", None)), flush=True)

    def _instantiate_trainer(self, config: dict, callbacks: list):
        # The frame bar and checkpoints are always configured (``progress``, ``checkpoint``); Lightning refuses
        # a bar it is told not to show, and ``enable_checkpointing false`` means none of ours either.
        drop = tuple(cls for cls, key in ((FrameProgressBar, "enable_progress_bar"), (FrameCheckpoint, "enable_checkpointing"))
                     if config.get(key) is False)
        if config.get("strategy") == "ddp" and getattr(self.model, "ddp_find_unused_parameters", False):
            # Learners with two optimizers (TD3) leave part of the module out of each backward; DDP must look for it.
            config["strategy"] = DDPStrategy(find_unused_parameters=True)
        return super()._instantiate_trainer(config, [cb for cb in callbacks if not isinstance(cb, drop)])

    def instantiate_classes(self) -> None:
        # A constructor's ValueError is a config value that cannot be used: one line, exit 2.
        try:
            super().instantiate_classes()
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError(_innermost_message(error)) from error
        # Every check that can refuse the command has passed (those of the classes just built included): only now
        # does it touch the MLflow store and claim its checkpoint folder, so a refused command leaves both as they were.
        if getattr(self, "_store", None) is not None:
            MLFLOW_DIR.mkdir(exist_ok=True)
            prepare_store(*self._store)
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if self.subcommand == "fit" and config is not None:
            claim_folder(config)  # this launch holds its folder from here on

    def _parse_ckpt_path(self) -> None:
        # Lightning would torch.load a ``--ckpt_path`` file here, unverified and whole, and put its learner
        # hyperparameters over the command's. The checkpoint is verified and compared with the command in
        # before_instantiate_classes instead, where ``last`` is known too; a difference is refused, not hidden.
        pass

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if config is None:
            return
        if config.get("auto_bf16"):
            # Said once the run starts (before_fit), so that a refused config prints its one error line alone.
            config.trainer.precision, self.precision_line = precision.choose(config.trainer.get("accelerator"),
                                                                             config.trainer.get("precision"))
        # The run's name, <env>-<method>-seed<k>, also names its checkpoint folder, so that a later
        # ``--ckpt_path last`` finds it (Lightning resolves ``last`` before any callback's setup).
        # (LightningCLI has resolved ``seed_everything: true`` to the drawn seed by now.)
        env_id, seed = config.data.env_id, config.data.get("seed")
        seed = config.get("seed_everything") if seed is None else seed
        selector = config.data.get("selector")
        selector = str(selector.get("class_path", "")) if isinstance(selector, Namespace) else "SUNAdaptive"
        method, name = method_of(selector), name_of_run(env_id, selector, seed)
        version = 0
        if config.get("checkpoint") is not None:
            base = config.checkpoint.get("dirpath") or Path(config.trainer.get("default_root_dir") or ".") / name
            version = choose_folder(config, base) if self.subcommand == "fit" else 0
            if version and not config.get("ckpt_path"):
                self.folder_line = (f"note: {base} holds an earlier run's checkpoints; this run writes its own to "
                                    f"{config.checkpoint.dirpath}")
        # Every value against its constructor's annotated domain, before anything is built.
        check_config(config, {"model": None, "data": DataConfig,
                              **{group: callback_class(group) for group in CALLBACK_GROUPS}})
        if self.subcommand == "fit" and config.get("ckpt_path"):
            last = config.ckpt_path == "last"
            check_checkpoint(config, seed, method)
            if last and config.get("checkpoint") is not None:
                self.folder_line = resumed_note(base, config.ckpt_path)
        logger = config.get("trainer", {}).get("logger")
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith("MLFlowLogger"):
            if logger.class_path == "lightning.pytorch.loggers.MLFlowLogger":
                # The config.yaml of an earlier run: ours takes the same arguments and survives a failing store.
                logger.class_path = "sun_lightning.tracking.logger.SUNMLFlowLogger"
            args = logger.get("init_args") or Namespace()
            self._store = (args.get("tracking_uri") or MLFLOW_URI, args.get("experiment_name") or "lightning_logs",
                          args.get("artifact_location"))  # made or checked once every class is built
            args.run_name = (args.get("run_name") or name) + run_folders.suffix(version)  # another run, another name
            resumed = resumed_run(config)
            if resumed and not args.get("run_id"):
                args.run_id = resumed  # a resumed run continues its MLflow run
            accelerator = config.get("trainer", {}).get("accelerator") or "auto"
            args.tags = {**(args.get("tags") or {}), **run_tags(env_id, method, seed, str(accelerator))}
            logger.init_args = args


def main(args: list[str] | None = None, run: bool = True) -> SUNCLI:
    """Entry point of ``python -m sun_lightning``."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    check_config_files(sys.argv[1:] if args is None else args)  # a YAML error names its file, line and column
    tune_allocator()
    quiet_third_party(_command_text(sys.argv[1:] if args is None else args))
    return SUNCLI(
        model_class=Learner,
        datamodule_class=ExplorationDataModule,
        subclass_mode_model=True,
        save_config_callback=MLflowSaveConfig,
        save_config_kwargs={"save_to_log_dir": False, "overwrite": True},
        seed_everything_default=0,
        trainer_defaults={
            # The DataModule ends the run at data.total_frames (one epoch, or one more after resuming a finished run).
            "max_epochs": -1,
            "num_sanity_val_steps": 0,
            # A bar counting env frames (``progress``), dropped when this is false.
            "enable_progress_bar": True,
            "default_root_dir": "checkpoints",
            # The config is logged as params once, under its config paths (MLflowSaveConfig); Lightning's
            # own hparams logging would add the learner's arguments a second time under bare names.
            "enable_autolog_hparams": False,
            "enable_model_summary": False,
            "logger": {
                "class_path": "sun_lightning.tracking.logger.SUNMLFlowLogger",
                "init_args": {"experiment_name": "sun_lightning", "tracking_uri": MLFLOW_URI},
            },
        },
        parser_kwargs={"prog": PROG},
        parser_class=SUNArgumentParser,
        args=args,
        run=run,
    )


def _command_text(argv: list[str]) -> str:
    """The command line and its config files' text (what a run is about, for :func:`quiet_third_party`)."""
    texts = [" ".join(map(str, argv))]
    for name in config_files(argv):
        try:
            texts.append(Path(name).read_text())
        except OSError:
            pass
    return "\n".join(texts)


def _innermost_message(error: BaseException) -> str:
    """The message of the first ValueError in ``error``'s chain: the constructor's own, which jsonargparse
    wraps in "Does not validate against any of the Union subtypes"."""
    found, seen = error, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ValueError):
            found = error
        error = error.__cause__ or error.__context__
    return str(found).strip().splitlines()[0]
