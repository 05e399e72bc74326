"""Logs exploration, goal-selection and learner metrics against env frames (SPEC §7)."""

from __future__ import annotations

import time

import lightning.pytorch as pl

from sun_lightning.callbacks.schedule import EveryFrames
from sun_lightning.exploration.distributed import mean_over_ranks
from sun_lightning.exploration.view import RunView, run_view
from sun_lightning.domains import PositiveInt, check_arguments
from sun_lightning.metrics.behaviour import behaviour_metrics
from sun_lightning.metrics.exploration import exploration_metrics


class ExplorationLogger(pl.Callback):
    """Every ``log_every_frames`` env frames and at the end, logs to every logger with step = env frames.

    Lightning's ``global_step`` counts optimizer steps, so the x-axis is the
    DataModule's own frame counter. Metrics:

    - ``explore/visits/{coverage,entropy}``: over all visits in D.
    - ``explore/visits/knn_entropy``: at every log, when ``knn_entropy`` is set (the paper's LunarLander(Full) curve
      of k-NN entropy over training; ≈ 0.1–1 s per log on 40 000 entries, its subsamples drawn from a generator of
      their own).
    - ``explore/goals/*``: goal statistics of the window (see ``CollectionStats``), and a rule's own state
      (``GoalSelector.metrics``: DISCOVER's adapted weight on μ, ``explore/goals/mean_weight``).
    - ``explore/episodes/reach``, ``explore/actions/{unmoved,saturation}``: how far the window's episodes got,
      how many steps went nowhere and how saturated its continuous actions were
      (:mod:`sun_lightning.metrics.behaviour`).
    - ``train/*``: learner statistics averaged over the window's updates.
    - ``perf/speed/frames_per_second``: env frames per wall-clock second in the window.
    - ``perf/run/minutes``, ``perf/run/frames_per_second``: at the end, the run's wall-clock minutes from the start of
      ``fit`` (warm-up, updates, logging and evaluation; the sessions of a resumed run added up, the time between them
      not) and its env frames per second over them: the paper's runtime table (its appendix "Compute Details and
      Runtimes"). Where it ran is the run's ``hardware`` tag.
    - ``perf/run/cpu_share``: at the end, the CPU seconds this process spent (all its threads) per wall-clock second
      of the run: about the torch threads it was given when it had its cores, well below when another process
      shared them, so a run's minutes say whether they were taken under load.

    Under DDP the frames and every metric cover all ranks (the ``train/*`` means are averaged over the
    ranks' updates); rank 0 logs them.

    Args:
        log_every_frames: logging period in env frames.
        knn_entropy: also compute the k-NN entropy at every log (LunarLanderFull).
        verbose: print a one-line summary at every log.
    """

    def __init__(self, log_every_frames: PositiveInt = 5000, knn_entropy: bool = False, verbose: bool = True) -> None:
        check_arguments(ExplorationLogger.__init__, {"log_every_frames": log_every_frames})
        self.log_every_frames, self.knn_entropy, self.verbose = log_every_frames, knn_entropy, verbose
        self.final: dict[str, float] = {}
        self._run: RunView | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._run = run_view(trainer)
        self._trainer, self._module = trainer, pl_module
        self._schedule, self._last_time, self._last_frames = EveryFrames(self.log_every_frames), time.perf_counter(), 0
        self._started, self._seconds_before = time.perf_counter(), 0.0
        self._cpu_started, self._cpu_before = time.process_time(), 0.0
        self._run.events.subscribe("frames", self._on_frames)

    def _on_frames(self, frames: int) -> None:
        if self._schedule.tick(frames):
            self.log_now(frames)

    def log_now(self, frames: int) -> dict[str, float]:
        run, trainer = self._run, self._trainer
        now = time.perf_counter()
        window, train = run.window.pop(), self._module.pop_train_metrics()
        if trainer.world_size > 1:  # every rank's updates (D and the window are the job's on every rank already)
            strategy = trainer.strategy
            train = mean_over_ranks(train, lambda t: strategy.reduce(t.to(strategy.root_device), reduce_op="mean").cpu())
            if not trainer.is_global_zero:
                self._last_frames = frames  # the schedule of every rank stays rank 0's
                return {}
        visits = run.pseudocount.visits() if run.goal_space.exact_counts else None
        metrics = exploration_metrics(run.storage, visits, knn=self.knn_entropy)
        metrics.update(behaviour_metrics(run.storage, self._last_frames // run.storage.num_envs))
        metrics.update(window)
        metrics.update(run.config.selector.metrics())
        metrics.update(train)
        metrics["perf/speed/frames_per_second"] = (frames - self._last_frames) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_frames = now, frames
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=frames)
        if self.verbose:
            shown = ("explore/visits/coverage", "explore/visits/entropy", "explore/goals/success", "train/loss/td")
            text = "  ".join(f"{name.rsplit('/', 1)[-1]}={metrics[name]:.4f}" for name in shown if name in metrics)
            line = f"[frames {frames}] {text}  fps={metrics['perf/speed/frames_per_second']:.0f}"
            bar = self._trainer.progress_bar_callback
            if bar is not None:  # above the bar, not through it
                bar.print(line)
            else:
                print(line, flush=True)
        self.final = metrics
        return metrics

    def run_seconds(self) -> float:
        """Wall-clock seconds of the run so far: this session's and those of the sessions it resumes."""
        return self._seconds_before + time.perf_counter() - self._started

    def run_cpu_seconds(self) -> float:
        """CPU seconds this process spent on the run so far (every thread), this session's and the resumed ones'."""
        return self._cpu_before + time.process_time() - self._cpu_started

    def state_dict(self) -> dict:
        # The logging schedule, so that a resumed run logs at the frames the uninterrupted one does; its clocks.
        return {"next": self._schedule.next, "last_frames": self._last_frames, "seconds": self.run_seconds(),
                "cpu_seconds": self.run_cpu_seconds()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._schedule.next, self._last_frames = state_dict["next"], state_dict["last_frames"]
        self._seconds_before = state_dict.get("seconds", 0.0)  # checkpoints written before the clock: from here
        # Checkpoints written before the CPU clock: its share stays unknown (NaN) rather than understated.
        self._cpu_before = state_dict.get("cpu_seconds", float("nan"))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        frames = self._run.frames
        if frames != self._last_frames:
            self.final = self.log_now(frames)
        seconds = self.run_seconds()
        runtime = {"perf/run/minutes": seconds / 60, "perf/run/frames_per_second": frames / max(seconds, 1e-9),
                   "perf/run/cpu_share": self.run_cpu_seconds() / max(seconds, 1e-9)}
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(runtime, step=frames)
        self.final = {**self.final, **runtime}
        for logger in trainer.loggers:
            logger.save()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._run is not None:
            self._run.events.unsubscribe("frames", self._on_frames)
