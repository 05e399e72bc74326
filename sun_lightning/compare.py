"""Runs the paper's comparison: methods × seeds on one environment config, then reports (SPEC §7).

Usage::

    python -m sun_lightning.compare --config conf/four_room_stuck.yaml \\
        --methods sun sun_episodic discover adagoal random --seeds 0 1 2 --jobs 2 \\
        -- --data.total_frames 20000 --data.warmup_frames 5000

Arguments after ``--`` are passed to every run. Each run is an ordinary
``python -m sun_lightning fit`` process logged to the MLflow experiment
``--experiment`` with the run name ``<env>-<method>-seed<k>``; runs that already
finished there are not repeated, so an interrupted comparison resumes. The runs
are nested under one parent run of the experiment (``<env>-comparison``), which
holds the report (:mod:`sun_lightning.results.report`: Markdown, CSV and PNG, also
written to ``--results-dir``): mean ± std over seeds of the final metrics and their
AUCs, the relative AUC improvement over the baselines as in the paper's table,
curves with bands over seeds and the final heatmaps of each method.

The exit status is 1 when a run failed or did not finish, and the failed runs are named.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import yaml

from sun_lightning.methods import METHODS, method_args
from sun_lightning.results.report import fmt, label, summarize, write_report
from sun_lightning.results.runs import RunRecord, finished_runs, load_snapshot
from sun_lightning.tracking import MLFLOW_DIR, PARENT_TAG, comparison_parent, local_store_uri, prepare_store, run_name


def config_env_id(config: str | Path) -> str:
    """The ``data.env_id`` of an environment config (what the runs' names and the report are about)."""
    env_id = (yaml.safe_load(Path(config).read_text()) or {}).get("data", {}).get("env_id")
    if not env_id:
        raise ValueError(f"{config} sets no data.env_id")
    return env_id


def launch(args: argparse.Namespace, env_id: str, method: str, seed: int, extra: list[str], log_dir: Path):
    """Start one ``fit`` run as a process, its output going to ``<log_dir>/<run name>.log``."""
    name = run_name(env_id, method, seed)
    command = [
        sys.executable, "-m", "sun_lightning", "fit", "--config", args.config, *method_args(method, args.config),
        "--seed_everything", str(seed),
        "--trainer.logger.init_args.experiment_name", args.experiment,
        "--trainer.logger.init_args.run_name", name,
        "--trainer.default_root_dir", f"checkpoints/{args.experiment}/{name}",
        *extra,
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    log = open(log_dir / f"{name}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log


def run_all(args: argparse.Namespace, env_id: str, extra: list[str], on_finished) -> list[str]:
    """Run the missing methods × seeds, ``args.jobs`` at a time.

    Args:
        on_finished: called with each run's name when its process exits 0.

    Returns:
        ``"<run name> (exit <code>, log <path>)"`` of every run whose process failed.
    """
    done = finished_runs(mlflow.MlflowClient(local_store_uri()), args.experiment)
    # Seeds outermost, so that an early look at the store already has every method.
    queue = [(m, s) for s in args.seeds for m in args.methods if run_name(env_id, m, s) not in done]
    log_dir = MLFLOW_DIR / "logs" / args.experiment
    log_dir.mkdir(parents=True, exist_ok=True)
    running, failed = [], []
    while queue or running:
        while queue and len(running) < args.jobs:
            method, seed = queue.pop(0)
            process, log = launch(args, env_id, method, seed, extra, log_dir)
            running.append((run_name(env_id, method, seed), process, log, time.perf_counter()))
            print(f"started {running[-1][0]} (log {log.name})", flush=True)
        time.sleep(0.5)
        for entry in list(running):
            name, process, log, start = entry
            if process.poll() is None:
                continue
            running.remove(entry)
            log.close()
            status = "finished" if process.returncode == 0 else f"FAILED (exit {process.returncode}, see {log.name})"
            print(f"{name} {status} in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
            if process.returncode == 0:
                on_finished(name)
            else:
                failed.append(f"{name} (exit {process.returncode}, log {log.name})")
    return failed


def gather(args: argparse.Namespace, env_id: str) -> tuple[dict[str, list[RunRecord]], list[str]]:
    """Method → its finished runs (by seed), and the names of the requested runs that have not finished."""
    done = finished_runs(mlflow.MlflowClient(local_store_uri()), args.experiment)
    runs, missing = {}, []
    for method in args.methods:
        names = [run_name(env_id, method, s) for s in sorted(args.seeds)]
        runs[method] = [done[name] for name in names if name in done]
        missing += [name for name in names if name not in done]
    return runs, missing


def report(args: argparse.Namespace, env_id: str, parent: str, failed: list[str]) -> dict[str, list[RunRecord]]:
    """Write the report into the results folder and onto the parent run, nesting the runs under it."""
    client = mlflow.MlflowClient(local_store_uri())
    runs, _ = gather(args, env_id)
    for record in (r for records in runs.values() for r in records):
        client.set_tag(record.run_id, PARENT_TAG, parent)
    snapshots = {}
    for method, records in runs.items():
        snapshot = load_snapshot(client, records[0].run_id) if records else None
        if snapshot is not None:
            snapshots[method] = snapshot
    frames = sorted({r.frames for records in runs.values() for r in records})
    context = [f"`{env_id}`, config `{args.config}`, MLflow experiment `{args.experiment}` (parent run `{parent}`), "
               f"seeds {', '.join(map(str, args.seeds))}, {' / '.join(map(str, frames)) or 'no'} env frames per run.",
               "Cells: mean ± sample std over the n seeds that finished (n = 1: the value alone); AUC: the curve's "
               "mean height against env frames (SPEC §7); n/a: does not apply (goal statistics of a rule without "
               "goals, a baseline against itself) or no run."]
    out = Path(args.results_dir or Path("results") / args.experiment)
    for path in write_report(out, env_id, runs, snapshots, context, failed):
        client.log_artifact(parent, str(path))
    client.set_terminated(parent, "FINISHED")
    print(f"report: {out / 'report.md'}")
    return runs


def console_table(runs: dict[str, list[RunRecord]]) -> str:
    summary = summarize(runs)
    columns = list(next(iter(summary.values()), {}))
    lines = [f"{'method':<18s} {'n':>3s} " + " ".join(f"{c:>17s}" for c in columns)]
    for method, row in summary.items():
        cells = " ".join(f"{fmt(row[c]):>17s}" for c in columns)
        lines.append(f"{label(method):<18s} {len(runs[method]):>3d} {cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="environment config, e.g. conf/four_room_stuck.yaml")
    parser.add_argument("--methods", nargs="+", default=["sun", "sun_episodic", "discover", "adagoal", "random"],
                        choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: compare-<config name>)")
    parser.add_argument("--results-dir", default=None, help="where the report goes (default: results/<experiment>)")
    parser.add_argument("--report-only", action="store_true", help="report the finished runs, run nothing")
    args = parser.parse_args(argv)
    if not Path(args.config).is_file():
        parser.error(f"config file not found: {args.config}")
    try:
        env_id = config_env_id(args.config)
    except ValueError as error:
        parser.error(str(error))
    args.experiment = args.experiment or f"compare-{Path(args.config).stem}"
    MLFLOW_DIR.mkdir(exist_ok=True)
    prepare_store(local_store_uri(), args.experiment)
    client = mlflow.MlflowClient(local_store_uri())
    parent = comparison_parent(client, args.experiment, env_id)
    client.update_run(parent, status="RUNNING")
    for tag, value in {"methods": " ".join(args.methods), "seeds": " ".join(map(str, args.seeds)),
                       "config": args.config, "fit_args": " ".join(extra)}.items():
        client.set_tag(parent, tag, value)
    failed = []
    if not args.report_only:
        # Nested as soon as each finishes, so that the MLflow UI groups a comparison while it runs.
        experiment_id = client.get_experiment_by_name(args.experiment).experiment_id

        def nest(name: str) -> None:
            for run in client.search_runs([experiment_id], f"attributes.run_name = '{name}'", max_results=1,
                                          order_by=["attributes.start_time DESC"]):
                client.set_tag(run.info.run_id, PARENT_TAG, parent)

        failed = run_all(args, env_id, extra, nest)
    runs = report(args, env_id, parent, [f.split(" ", 1)[0] for f in failed])
    print(f"\n{args.config}, experiment {args.experiment!r}: final values and AUCs (mean ± std over seeds)")
    print(console_table(runs))
    if not args.report_only:
        _, missing = gather(args, env_id)
        unexplained = [name for name in missing if not any(f.startswith(name + " ") for f in failed)]
        problems = failed + [f"{name} (exited 0 but its MLflow run did not finish)" for name in unexplained]
        if problems:
            print(f"{len(problems)} run(s) failed: {'; '.join(problems)}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
