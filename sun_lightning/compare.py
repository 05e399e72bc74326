"""Runs the paper's comparison or its whole study: configs × methods × seeds, then reports (SPEC §7).

Usage::

    python -m sun_lightning.compare --config conf/four_room_stuck.yaml \\
        --methods sun sun_episodic discover adagoal random --seeds 0 1 2 --jobs 2 \\
        -- --data.total_frames 20000 --data.warmup_frames 5000
    python -m sun_lightning.compare --configs conf/three_room.yaml conf/mountain_car.yaml \\
        --methods sun random --grid data.rho=0.01,0.5 --seeds 0 1 --budget-scale 0.1
    python -m sun_lightning.compare --suite paper --launcher ray --address auto --cpus-per-run 2 \\
        --tracking-uri http://mlflow-host:5000

Arguments after ``--`` are passed to every run. Each run is an ordinary
``python -m sun_lightning fit`` process logged to the MLflow experiment
``--experiment`` with the run name ``<env>-<method>-seed<k>``; runs that already
finished there are not repeated, and a run with a checkpoint continues from it
(``--ckpt_path last``), so an interrupted study resumes. The runs are nested under
one parent run of the experiment, which holds the report (also written to
``--results-dir``): per environment :mod:`sun_lightning.results.report` (mean [95 % interval] (n) over
seeds of the final metrics and their AUCs, the relative AUC improvement over the
baselines, curves, heatmaps); with several environments, in ``<Env>/`` folders, plus the
study report :mod:`sun_lightning.results.study` (the improvement averaged over
environments, a grid of curves, a bar chart). ``--launcher ray`` runs each run as a
Ray task (:mod:`sun_lightning.study.ray_launcher`). docs/study.md has the whole story.

``--status`` lists each run (finished, running, unfinished, to run) with the minutes the unfinished ones need
(:mod:`sun_lightning.study.status`), and runs nothing. ``--reuse`` takes the runs recorded in earlier reports
(another machine's, or a lost store's: :mod:`sun_lightning.results.recorded`) for finished: they are not run again
(the same config and seed give the same numbers) and the report holds them.

The exit status is 1 when a run failed or did not finish, and the failed runs are named. Ctrl-C (or SIGTERM)
stops the running runs, each with a checkpoint, and exits 130; the same command resumes them.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import cache
from pathlib import Path

from sun_lightning.errors import ConfigError
from sun_lightning.methods import METHODS, method_args
from sun_lightning.study.gpus import GpuSlots, accelerator_args, check_share, visible_gpus
from sun_lightning.study.plan import (PAPER_CONFIGS, PAPER_METHODS, RunSpec, budget_args, config_env_id,
                                      parse_grid, plan)
from sun_lightning.study.ray_launcher import MISSING, require_ray

__all__ = ["config_env_id", "main"]

DEFAULT_METHODS = ["sun", "sun_episodic", "discover", "adagoal", "random"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.compare", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", help="one environment config, e.g. conf/four_room_stuck.yaml")
    which.add_argument("--configs", nargs="+", help="several environment configs: a study")
    which.add_argument("--suite", choices=["paper"], help="paper: the paper's 14 configs and its 4 methods")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(METHODS),
                        help=f"default: {' '.join(DEFAULT_METHODS)} (--suite paper: {' '.join(PAPER_METHODS)})")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="extra methods: SUN with each value of a fit option, named <key>=<value> "
                             "(e.g. data.rho=0.01,0.1,0.5 or data.counts=binned); repeatable")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="scale every config's frames, warm-up, logging and checkpoint periods (0.1: a smoke study)")
    parser.add_argument("--launcher", choices=["local", "ray"], default="local",
                        help="local: processes, --jobs at a time; ray: a Ray task per run (pip install -e '.[ray]')")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs at once (local launcher; default 1, or as many as --gpus-per-run packs onto the GPUs)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--address", default=None, help="Ray cluster: auto or ray://host:port (default: a local one)")
    parser.add_argument("--cpus-per-run", type=float, default=1.0, help="CPUs a Ray task holds")
    parser.add_argument("--gpus-per-run", type=float, default=0.0,
                        help="GPUs each run holds and trains on: a fraction packs runs onto one GPU (0.25: four per "
                             "GPU), a whole number gives each run its own (default 0: the CPU)")
    parser.add_argument("--retries", type=int, default=3, help="Ray retries of a run whose worker died")
    parser.add_argument("--experiment", default=None,
                        help="MLflow experiment (default: compare-<config name>, study-<config names>, study-paper)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store of the study and its runs (default: ./mlruns; a server URI on a cluster)")
    parser.add_argument("--results-dir", default=None, help="where the report goes (default: results/<experiment>)")
    parser.add_argument("--report-only", action="store_true", help="report the finished runs, run nothing")
    parser.add_argument("--reuse", nargs="+", default=[], metavar="FOLDER",
                        help="report folders (runs.csv), or studies of them, whose runs count as finished: not run "
                             "again, and reported with the rest (e.g. docs/study_dqn)")
    parser.add_argument("--status", action="store_true",
                        help="list each run (finished, running, unfinished, to run) and the time the rest needs; run and "
                             "report nothing")
    args = parser.parse_args(argv)
    args.configs = list(PAPER_CONFIGS) if args.suite else args.configs or [args.config]
    args.methods = args.methods or (list(PAPER_METHODS) if args.suite else list(DEFAULT_METHODS))
    for config in args.configs:
        if not Path(config).is_file():
            parser.error(f"config file not found: {config}")
    for folder in args.reuse:
        if not Path(folder).is_dir():
            parser.error(f"--reuse: no such folder: {folder}")
    if not args.budget_scale > 0:
        parser.error(f"--budget-scale must be positive, got {args.budget_scale}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.gpus_per_run:
        try:
            check_share(args.gpus_per_run)
        except ValueError as error:
            parser.error(str(error))
    try:
        args.grid = parse_grid(args.grid)
        args.specs = plan(args.configs, args.methods, args.grid, args.seeds, method_args)
    except ValueError as error:
        parser.error(str(error))
    if not args.experiment:
        stems = [Path(c).stem for c in args.configs]
        args.experiment = ("study-paper" if args.suite else f"compare-{stems[0]}" if len(stems) == 1
                           else "study-" + "-".join(stems)[:80])
    if args.launcher == "ray" and not args.report_only:
        try:
            require_ray()
        except ImportError:
            print(f"error: {MISSING}", file=sys.stderr)
            sys.exit(2)
    return args


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    argv = sys.argv[1:] if argv is None else argv
    extra = tuple(argv[argv.index("--") + 1:]) if "--" in argv else ()
    args = parse(argv[: argv.index("--")] if "--" in argv else argv)
    # MLflow and the report (torch) load only now, so that a bad argument is refused at once.
    import mlflow

    from sun_lightning.study.report import console_study, console_table, gather, report
    from sun_lightning.results.domains import averaged
    from sun_lightning.results.recorded import recorded_runs
    from sun_lightning.results.runs import finished_runs
    from sun_lightning.study.local import StudyInterrupted, run_local
    from sun_lightning.study.ray_launcher import run_ray
    from sun_lightning.tracking.store import (MLFLOW_DIR, PARENT_TAG, absolute_uri, comparison_parent,
                                              local_store_uri, prepare_store)

    slots = None
    if args.gpus_per_run and args.launcher == "local" and not args.report_only:
        try:
            slots = GpuSlots(visible_gpus(), args.gpus_per_run)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)
    uri = absolute_uri(args.tracking_uri or local_store_uri())  # Ray workers start in other folders
    if uri == local_store_uri():
        MLFLOW_DIR.mkdir(exist_ok=True)
    try:
        prepare_store(uri, args.experiment)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    client = mlflow.MlflowClient(uri)
    try:
        recorded = recorded_runs(args.reuse) if args.reuse else {}
    except ValueError as error:  # a folder without a report, or a runs.csv that is not a report's
        print(f"error: --reuse: {error}", file=sys.stderr)
        sys.exit(2)
    names = {spec.name for spec in args.specs}
    reused = {name: run for name, run in recorded.items() if name in names}
    if args.status:
        from sun_lightning.study.status import status_table, study_status

        # every recorded run, in the study or not, informs the estimates
        states = study_status(client, args.experiment, args.specs, Path.cwd(), args.budget_scale, extra,
                              {name: run.record for name, run in recorded.items()})
        print(f"experiment {args.experiment!r}, {uri}")
        print(status_table(states, args.jobs or 1))
        return
    env_ids = list(dict.fromkeys(s.env_id for s in args.specs))
    parent = comparison_parent(client, args.experiment, env_ids[0] if len(env_ids) == 1 else None,
                               None if len(env_ids) == 1 else f"{args.experiment}-study")
    client.update_run(parent, status="RUNNING")
    for tag, value in {"methods": " ".join(args.methods), "grid": " ".join(args.grid),
                       "seeds": " ".join(map(str, args.seeds)), "configs": " ".join(args.configs),
                       "budget_scale": f"{args.budget_scale:g}", "fit_args": " ".join(extra)}.items():
        client.set_tag(parent, tag, value)
    failed = []
    if not args.report_only:
        done = finished_runs(client, args.experiment)
        todo = [spec for spec in args.specs if spec.name not in done and spec.name not in reused]
        if reused:
            print(f"{len(reused)} run(s) recorded in {', '.join(args.reuse)}: not run again")
        experiment_id = client.get_experiment_by_name(args.experiment).experiment_id

        def nest(name: str) -> None:
            # Nested as soon as each finishes, so that the MLflow UI groups a study while it runs.
            for run in client.search_runs([experiment_id], f"attributes.run_name = '{name}'", max_results=1,
                                          order_by=["attributes.start_time DESC"]):
                client.set_tag(run.info.run_id, PARENT_TAG, parent)

        @cache
        def scaled(config: str) -> tuple[str, ...]:
            return budget_args(config, args.budget_scale)

        gpu_args = accelerator_args(args.gpus_per_run) if args.gpus_per_run else ()

        def run_extra(spec: RunSpec) -> tuple[str, ...]:
            return scaled(spec.config) + gpu_args + extra  # the user's arguments last: they win

        log_dir = MLFLOW_DIR / "logs" / args.experiment
        log_dir.mkdir(parents=True, exist_ok=True)
        if args.launcher == "ray":
            failed = run_ray(todo, args.experiment, uri, run_extra, log_dir, args.address, args.cpus_per_run,
                             args.gpus_per_run, args.threads, args.retries, nest)
        else:
            jobs = args.jobs or (slots.capacity if slots else 1)
            try:
                failed = run_local(todo, args.experiment, uri, run_extra, log_dir, jobs, args.threads, nest, slots)
            except StudyInterrupted as stop:
                client.update_run(parent, status="KILLED")
                print(f"interrupted: {stop}; each saved a checkpoint, and the same command resumes the study",
                      file=sys.stderr)
                sys.exit(130)
    study = report(client, args, args.specs, parent, [f.split(" ", 1)[0] for f in failed], reused)
    for config, env_id in dict.fromkeys((s.config, s.env_id) for s in args.specs):
        print(f"\n{config}, experiment {args.experiment!r}: final values and AUCs (mean [95 % interval] (n) over seeds)")
        print(console_table(study[env_id]))
    if len(study) > 1:
        print(f"\nrelative AUC improvement averaged over {len(averaged(study))} environments")
        print(console_study(study))
    if not args.report_only:
        _, missing = gather(client, args.experiment, args.specs, reused)
        unexplained = [name for name in missing if not any(f.startswith(name + " ") for f in failed)]
        problems = failed + [f"{name} (exited 0 but its MLflow run did not finish)" for name in unexplained]
        if problems:
            print(f"{len(problems)} run(s) failed: {'; '.join(problems)}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
