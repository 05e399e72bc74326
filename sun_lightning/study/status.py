"""Where a study stands: each run finished, running, unfinished or still to run, and the time the rest needs.

``python -m sun_lightning.compare … --status`` reads the study's MLflow experiment and checkpoint folders and runs
nothing. A study of the paper's DQN half takes days of two cores; this is what says how far it got and how long the
rest will take, before a session decides what to start.

- **finished**: the experiment has its finished ``fit`` run, or a report of ``--reuse`` recorded it; its wall-clock
  minutes (``perf/run/minutes``).
- **running**: a live process holds its checkpoint folder (:func:`~sun_lightning.checkpoints.run_folders.holder`);
  the env frames its MLflow run logged last, of the run's budget.
- **unfinished**: no process holds it and it has a checkpoint to resume from; the env frames its MLflow run logged
  last (the checkpoint is at or past them).
- **to run**: none of these.

The estimate for a run not finished is the median minutes of the experiment's finished runs of the same environment
and method (without one: another method's there, times the two methods' ratio where both finished), times the share
of its budget still to go; a run with neither has none ("?"). Finished runs' minutes were measured under whatever
load they ran beside, and so is the estimate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import mlflow
import yaml

from sun_lightning.checkpoints import run_folders
from sun_lightning.results.runs import RunRecord, finished_runs
from sun_lightning.study.plan import RunSpec, budget_args, checkpoint_dir, signature_default
from sun_lightning.tracking.naming import env_name

#: What an interrupted run's progress is read from: a curve every run logs against env frames.
PROGRESS_METRIC = "explore/visits/coverage"
FINISHED, RUNNING, UNFINISHED, TO_RUN = "finished", "running", "unfinished", "to run"


@dataclass(frozen=True)
class RunState:
    """One run of a study and where it stands.

    Attributes:
        frames: env frames done (finished: its last logged frame; running or unfinished: the last its MLflow run
            logged; to run: 0).
        budget: its ``data.total_frames``.
        minutes: finished: its wall-clock minutes (``None``: not recorded); else the estimate of what is left
            (``None``: no finished run to estimate from).
        basis: what the estimate stands on (:func:`estimate`; "" for a finished run or no estimate).
    """

    spec: RunSpec
    state: str
    frames: int
    budget: int
    minutes: float | None
    basis: str = ""


def run_budget(config: str, scale: float = 1.0, extra: tuple[str, ...] = ()) -> int:
    """A run's env frames: the last ``--data.total_frames`` of its budget scaling and the extra ``fit`` arguments,
    else the config's ``data.total_frames``."""
    args = list(budget_args(config, scale)) + list(extra)
    given = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--data.total_frames"]
    if given:
        return int(given[-1])
    total = ((yaml.safe_load(Path(config).read_text()) or {}).get("data") or {}).get("total_frames")
    if total is None:
        from sun_lightning.exploration.config import DataConfig  # torchrl: only for a config that leaves it out
        total = signature_default(DataConfig, "total_frames")
    return int(total)


def logged_frames(client: mlflow.MlflowClient, experiment_id: str, name: str) -> int:
    """The env frames the newest MLflow run named ``name`` logged its progress curve at last (0: none)."""
    for run in client.search_runs([experiment_id], f"attributes.run_name = '{name}'", max_results=1,
                                  order_by=["attributes.start_time DESC"]):
        history = client.get_metric_history(run.info.run_id, PROGRESS_METRIC)
        return int(max((m.step for m in history), default=0))
    return 0


def study_status(client: mlflow.MlflowClient, experiment: str, specs: list[RunSpec], root: Path = Path("."),
                 scale: float = 1.0, extra: tuple[str, ...] = (),
                 reused: dict[str, RunRecord] | None = None) -> list[RunState]:
    """Each run of ``specs`` and where it stands in ``experiment`` and under ``root`` (the study's folder); a run
    of ``reused`` (recorded by earlier reports, ``--reuse``) the store lacks is finished as they recorded it."""
    done: dict[str, RunRecord] = {**(reused or {}), **finished_runs(client, experiment)}
    found = client.get_experiment_by_name(experiment)
    minutes: dict[tuple[str, str], list[float]] = {}  # (environment, method) → minutes, over the whole experiment
    for record in done.values():
        env, _, _ = record.name.partition(f"-{record.method}-seed")
        if record.minutes is not None:
            minutes.setdefault((env, record.method), []).append(record.minutes)
    budgets = {config: run_budget(config, scale, extra) for config in dict.fromkeys(s.config for s in specs)}
    states = []
    for spec in specs:
        budget = budgets[spec.config]
        record = done.get(spec.name)
        if record is not None:
            states.append(RunState(spec, FINISHED, record.frames, budget, record.minutes))
            continue
        folder = run_folders.newest_folder(root / checkpoint_dir(experiment, spec.name))[0]
        state = (RUNNING if run_folders.holder(folder) is not None
                 else UNFINISHED if run_folders.has_checkpoints(folder) else TO_RUN)
        frames = logged_frames(client, found.experiment_id, spec.name) if state != TO_RUN and found else 0
        whole, basis = estimate(minutes, env_name(spec.env_id), spec.method)
        left = None if whole is None else whole * max(0.0, 1 - frames / budget)
        states.append(RunState(spec, state, frames, budget, left, basis))
    return states


def estimate(minutes: dict[tuple[str, str], list[float]], env: str, method: str) -> tuple[float | None, str]:
    """The minutes a whole run of ``method`` on ``env`` (its name in run names) takes, and what the figure stands on.

    The median of its finished runs there; without one, another method's median there times the two methods'
    ratio of medians on the environments where both finished (the method that shares most of them); else none.
    """
    own = minutes.get((env, method))
    if own:
        return statistics.median(own), f"median of {len(own)} finished"
    best = None
    for (where, other), here in minutes.items():
        if where != env or other == method:
            continue
        shared = [e for (e, m) in minutes if m == method and (e, other) in minutes]
        if shared and (best is None or len(shared) > len(best[1])):
            best = (other, shared, here)
    if best is None:
        return None, ""
    other, shared, here = best
    ratio = statistics.median([statistics.median(minutes[(e, method)]) / statistics.median(minutes[(e, other)])
                               for e in shared])
    return statistics.median(here) * ratio, f"{other} here × {ratio:.2f}, its ratio on {len(shared)} env(s)"


def status_table(states: list[RunState], jobs: int = 1) -> str:
    """The console table of :func:`study_status`, then the counts and the time left at ``jobs`` runs at once."""
    width = max((len(s.spec.name) for s in states), default=3)
    lines = [f"{'run':<{width}}  {'state':<11}  {'env frames':>17}  minutes"]
    for s in states:
        if s.state == FINISHED:
            when = "n/a" if s.minutes is None else f"{s.minutes:.1f}"
        else:
            when = f"≈ {s.minutes:.0f} left ({s.basis})" if s.minutes is not None else "? (no finished run to go by)"
        lines.append(f"{s.spec.name:<{width}}  {s.state:<11}  {s.frames:>8} / {s.budget:<6}  {when}")
    count = {state: sum(s.state == state for s in states) for state in (FINISHED, RUNNING, UNFINISHED, TO_RUN)}
    unfinished = [s for s in states if s.state != FINISHED]
    left = sum(s.minutes for s in unfinished if s.minutes is not None)
    unknown = sum(s.minutes is None for s in unfinished)
    lines.append(f"{len(states)} runs: " + ", ".join(f"{n} {state}" for state, n in count.items()) + "; "
                 f"left ≈ {left:.0f} min of runs, ≈ {left / jobs / 60:.1f} h at {jobs} at once"
                 + (f", and {unknown} run(s) without an estimate" if unknown else ""))
    return "\n".join(lines)
