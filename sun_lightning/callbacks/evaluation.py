"""The goal-reaching evaluation during training, logged against env frames as ``eval/*``."""

from __future__ import annotations

import time
from functools import partial
from typing import Literal

import gymnasium
import lightning.pytorch as pl
import torch
from gymnasium.vector import AutoresetMode

from sun_lightning.callbacks.schedule import EveryFrames
from sun_lightning.envs.eval_goals import configured_eval_goals
from sun_lightning.errors import ConfigError
from sun_lightning.exploration.view import RunView, run_view
from sun_lightning.metrics.evaluation import SUCCESS, EvalResult, GoalEvaluator, policy_of
from sun_lightning.checkpoints.rng import rng_state, set_rng_state

#: Wall-clock seconds of one evaluation (what it costs; it is also inside ``perf/speed/frames_per_second``).
EVAL_SECONDS = "perf/eval/seconds"


class GoalEvaluation(pl.Callback):
    """Every ``every_frames`` env frames and at the end of training, evaluates goal reaching
    (:mod:`sun_lightning.metrics.evaluation`) and logs, with step = env frames:

    - ``eval/success``: fraction of the evaluation goals reached within one horizon;
    - ``eval/final_distance``: mean distance from each goal where its pursuit ended;
    - ``eval/steps_to_goal``: mean env steps to the goals reached (0 when none was);
    - ``perf/eval/seconds``: wall-clock time of the evaluation.

    The evaluation runs in envs of its own from the environment's start states (seeded with ``seed``, the same
    starts every time), reads the learner without changing it, and restores the global random generators
    (torch, numpy, Python) afterwards: a run with evaluation trains exactly as the same run without it. Under
    DDP rank 0 evaluates. The latest result (:attr:`latest`) feeds the results pictures' success map.

    Args:
        every_frames: evaluation period in env frames; 0 or ``None`` turns the evaluation off.
        max_goals: evaluate at most this many of the environment's goals, evenly spaced through its set
            (``None``: all of them; PointMaze-H has 2594).
        seed: seed of the evaluation envs' start states (and of a goal-free rule's random actions).
        verbose: print a one-line summary at every evaluation.
        goals: which goals: ``auto`` (the environment's own set, docs/evaluation.md; for an environment from
            outside the package, a grid over its goal bounds), ``grid`` (that grid: ⌊max_goals^(1/d)⌋ values per
            goal dimension) or a list of goals, each its goal values (then the goal action, on discrete actions).
    """

    def __init__(self, every_frames: int | None = 0, max_goals: int | None = 256, seed: int = 0,
                 verbose: bool = True, goals: Literal["auto", "grid"] | list[list[float]] = "auto") -> None:
        if every_frames is not None and every_frames < 0:
            raise ValueError(f"eval.every_frames must be >= 0 (0 turns the evaluation off), got {every_frames}")
        if max_goals is not None and max_goals <= 0:
            raise ValueError(f"eval.max_goals must be positive or null, got {max_goals}")
        self.every_frames, self.max_goals, self.seed, self.verbose = every_frames or 0, max_goals, seed, verbose
        self.goals = goals
        self.latest: EvalResult | None = None
        self.latest_frames = -1  # the env frames of ``latest``
        self._evaluator: GoalEvaluator | None = None
        self._schedule, self._last = EveryFrames(self.every_frames), -1
        self._run: RunView | None = None

    @property
    def enabled(self) -> bool:
        return self.every_frames > 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self.enabled:
            return
        run = self._run = run_view(trainer)
        goals = configured_eval_goals(run.config.env_id, run.goal_space, self.goals,
                                      self.max_goals).subset(self.max_goals)
        self._trainer, self._module = trainer, pl_module
        run.events.subscribe("frames", self._on_frames)
        if trainer.is_global_zero and self._evaluator is None:
            state = rng_state()  # building envs draws nothing from the global generators; made sure of here
            try:
                custom = run.custom
                if custom is None:
                    self._evaluator = GoalEvaluator(run.config.env_id, goals, self.seed)
                else:  # the user's environment, built as for training but with SAME_STEP autoreset
                    make_vec = partial(custom.make_vec, autoreset_mode=AutoresetMode.SAME_STEP)
                    horizon = gymnasium.spec(custom.gym_id).max_episode_steps
                    if not horizon:
                        raise ConfigError(f"eval.every_frames: {run.config.env_id} has no episode horizon "
                                          "(max_episode_steps) to evaluate within; set eval.every_frames 0")
                    self._evaluator = GoalEvaluator(run.config.env_id, goals, self.seed, make_vec, horizon)
                self._evaluator.env()
            finally:
                set_rng_state(state)

    def _on_frames(self, frames: int) -> None:
        # Also at the last frame, before the results' last snapshot (registered after this) draws the success map.
        if self._schedule.due(frames) or (frames >= self._run.config.total_frames and frames != self._last):
            self._schedule.advance(frames)
            self.evaluate(frames)

    def evaluate(self, frames: int) -> dict[str, float]:
        """Evaluate now and log at ``frames`` (rank 0); returns the metrics (empty on other ranks)."""
        self._last = frames
        if not self._trainer.is_global_zero:
            return {}
        run, start = self._run, time.perf_counter()
        state = rng_state()
        try:
            with torch.no_grad():
                act = policy_of(self._module, run.goal_space, run.config.selector.uses_goals, self.seed)
                scale = run.scale()
                self.latest = self._evaluator.run(act, None if scale is None else scale.cpu())
                self.latest_frames = frames
        finally:
            set_rng_state(state)
        metrics = self.latest.metrics()
        metrics[EVAL_SECONDS] = time.perf_counter() - start
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=frames)
        if self.verbose:
            line = (f"[frames {frames}] eval: success={metrics[SUCCESS]:.3f} of {len(self.latest.reached)} goals  "
                    f"final_distance={metrics['eval/final_distance']:.3f}  ({metrics[EVAL_SECONDS]:.1f} s)")
            bar = self._trainer.progress_bar_callback
            if bar is not None:
                bar.print(line)
            else:
                print(line, flush=True)
        return metrics

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.enabled and self._run.frames != self._last:
            self.evaluate(self._run.frames)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._run is not None:
            self._run.events.unsubscribe("frames", self._on_frames)
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None

    def state_dict(self) -> dict:
        # The schedule, so that a resumed run evaluates at the frames the uninterrupted one does.
        return {"next": self._schedule.next, "last": self._last}

    def load_state_dict(self, state_dict: dict) -> None:
        self._schedule.next, self._last = state_dict["next"], state_dict["last"]
