"""Runs the paper's comparison: methods × seeds on one environment config, then tabulates.

Usage::

    python -m sun_lightning.compare --config conf/four_room_stuck.yaml \\
        --methods sun sun_episodic discover adagoal random --seeds 0 1 2 --jobs 2 \\
        -- --data.total_frames 20000 --data.warmup_frames 5000

Arguments after ``--`` are passed to every run. Each run is an ordinary
``python -m sun_lightning fit`` process logged to the MLflow experiment
``--experiment`` with the run name ``<method>-seed<k>``; runs that already
finished there are not repeated, so an interrupted comparison resumes. The
table gives the mean and standard deviation over seeds of the final metrics
(SPEC §7) and the frames each run reached.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import numpy as np

from sun_lightning.methods import METHODS, method_args
from sun_lightning.metrics.auc import curve_auc
from sun_lightning.tracking import MLFLOW_DIR, MLFLOW_URI

REPORTED = ("explore/visits/coverage", "explore/visits/entropy", "explore/goals/success", "explore/goals/random_fraction")
#: Metrics whose area under the curve against env frames is reported too (``<name>_auc``).
CURVES = ("explore/visits/coverage", "explore/visits/entropy")


def run_name(method: str, seed: int) -> str:
    return f"{method}-seed{seed}"


def finished_runs(experiment: str) -> dict[str, dict]:
    """Run name → {metric: final value, "frames": last step} of the experiment's finished runs."""
    client = mlflow.MlflowClient(MLFLOW_URI)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return {}
    runs = {}
    for run in client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'"):
        name = run.info.run_name
        if name in runs:
            continue  # the newest finished run of a name wins (search order is newest first)
        values = {key: run.data.metrics[key] for key in REPORTED if key in run.data.metrics}
        for key in CURVES:
            history = client.get_metric_history(run.info.run_id, key)
            if history:
                values[key + "_auc"] = curve_auc([m.step for m in history], [m.value for m in history])
                values["frames"] = max(m.step for m in history)
        values.setdefault("frames", 0)
        runs[name] = values
    return runs


def launch(config: str, method: str, seed: int, experiment: str, extra: list[str], threads: int, log_dir: Path):
    command = [
        sys.executable, "-m", "sun_lightning", "fit", "--config", config, *method_args(method, config),
        "--seed_everything", str(seed),
        "--trainer.logger.init_args.experiment_name", experiment,
        "--trainer.logger.init_args.run_name", run_name(method, seed),
        "--trainer.default_root_dir", f"checkpoints/{experiment}/{run_name(method, seed)}",
        *extra,
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    log = open(log_dir / f"{run_name(method, seed)}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log


def run_all(args: argparse.Namespace, extra: list[str]) -> None:
    done = finished_runs(args.experiment)
    # Seeds outermost, so that an early look at the store already has every method.
    queue = [(m, s) for s in args.seeds for m in args.methods if run_name(m, s) not in done]
    log_dir = MLFLOW_DIR / "logs" / args.experiment
    log_dir.mkdir(parents=True, exist_ok=True)
    running, failed = [], []
    while queue or running:
        while queue and len(running) < args.jobs:
            method, seed = queue.pop(0)
            process, log = launch(args.config, method, seed, args.experiment, extra, args.threads, log_dir)
            running.append((method, seed, process, log, time.perf_counter()))
            print(f"started {run_name(method, seed)} (log {log.name})", flush=True)
        time.sleep(2.0)
        for entry in list(running):
            method, seed, process, log, start = entry
            if process.poll() is None:
                continue
            running.remove(entry)
            log.close()
            status = "finished" if process.returncode == 0 else f"FAILED (exit {process.returncode}, see {log.name})"
            print(f"{run_name(method, seed)} {status} in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
            if process.returncode != 0:
                failed.append(run_name(method, seed))
    if failed:
        print(f"failed runs: {', '.join(failed)}", file=sys.stderr)


def report(args: argparse.Namespace) -> str:
    """The table of final metrics and AUCs, mean ± std over the seeds that finished."""
    done = finished_runs(args.experiment)
    columns = (*REPORTED, *(key + "_auc" for key in CURVES))
    short = [name.rsplit("/", 1)[-1] for name in columns]
    lines = [f"{'method':<18s} {'seeds':>5s} {'frames':>7s} " + " ".join(f"{name:>17s}" for name in short)]
    for method in args.methods:
        rows = [done[run_name(method, s)] for s in args.seeds if run_name(method, s) in done]
        cells = []
        for key in columns:
            values = np.array([row[key] for row in rows if key in row])
            cells.append(f"{values.mean():8.3f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:5.3f}" if len(values) else f"{'—':>17s}")
        frames = min((int(row["frames"]) for row in rows), default=0)
        lines.append(f"{method:<18s} {len(rows):>5d} {frames:>7d} " + " ".join(f"{c:>17s}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="environment config, e.g. conf/four_room_stuck.yaml")
    parser.add_argument("--methods", nargs="+", default=["sun", "sun_episodic", "discover", "adagoal", "random"], choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: compare-<config name>)")
    parser.add_argument("--report-only", action="store_true", help="print the table of the finished runs, run nothing")
    args = parser.parse_args(argv)
    if not Path(args.config).is_file():
        parser.error(f"config file not found: {args.config}")
    args.experiment = args.experiment or f"compare-{Path(args.config).stem}"
    if not args.report_only:
        run_all(args, extra)
    print(f"\n{args.config}, experiment {args.experiment!r}, final values (mean ± std over seeds)")
    print(report(args))


if __name__ == "__main__":
    main()
