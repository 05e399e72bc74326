"""The comparison runner's report side: its runs gathered from MLflow, the reports written into the results folder and
onto the parent run, and the console tables (SPEC §7). The command line is :mod:`sun_lightning.compare`; the reports
themselves are :mod:`sun_lightning.results.report` and :mod:`sun_lightning.results.study`."""

from __future__ import annotations

import argparse
from pathlib import Path

import mlflow

from sun_lightning.checkpoints.integrity import LAST
from sun_lightning.metrics.straight_line import straight_line_context
from sun_lightning.results.archive import read_stages
from sun_lightning.results.checkpoint_figures import checkpoint_figures
from sun_lightning.results.domains import averaged
from sun_lightning.results.report import CELLS, fmt, fmt_percent, label, summarize, write_report
from sun_lightning.results.recorded import Recorded
from sun_lightning.results.runs import RunRecord, finished_runs, load_snapshots, seeds_held
from sun_lightning.results.study import averaged_relative, write_study
from sun_lightning.study.plan import RunSpec, checkpoint_dir
from sun_lightning.tracking.naming import env_name
from sun_lightning.tracking.store import PARENT_TAG

Study = dict[str, dict[str, list[RunRecord]]]


def gather(client: mlflow.MlflowClient, experiment: str, specs: list[RunSpec],
           reused: dict[str, Recorded] | None = None) -> tuple[Study, list[str]]:
    """env id → method → its finished runs (by seed), and the names of the planned runs that have not finished.
    A run the store lacks is taken from ``reused`` (runs earlier reports recorded, ``--reuse``) where it is there."""
    done = finished_runs(client, experiment)
    study: Study = {}
    missing = []
    for spec in sorted(specs, key=lambda s: s.seed):
        records = study.setdefault(spec.env_id, {}).setdefault(spec.method, [])
        record = done.get(spec.name) or (reused[spec.name].record if reused and spec.name in reused else None)
        if record is not None:
            record.method = spec.method  # a grid variant is tagged with its base method's name
            records.append(record)
        else:
            missing.append(spec.name)
    return study, missing


def record_config_env(config: str | Path) -> None:
    """Make the goal space (and a maze's map) of a config's own environment (``data.goal``, docs/custom-envs.md) known
    in this process, as a run does, so that its report can draw its heatmaps; registered ids need nothing."""
    import yaml

    from sun_lightning.envs.custom import GoalConfig, custom_env

    data = (yaml.safe_load(Path(config).read_text()) or {}).get("data") or {}
    if isinstance(data.get("goal"), dict):
        custom_env(data["env_id"], GoalConfig(**data["goal"]), data.get("env_package"))


def true_count_methods(specs: list[RunSpec]) -> set[str]:
    """The methods trained with true counts (``--grid data.counts=binned``): their data draws the pseudocounts at
    several radii (Figure 22)."""
    return {s.method for s in specs
            if any(a == "--data.counts" and b == "binned" for a, b in zip(s.method_args, s.method_args[1:]))}


def report(client: mlflow.MlflowClient, args: argparse.Namespace, specs: list[RunSpec], parent: str,
           failed: list[str], reused: dict[str, Recorded] | None = None) -> Study:
    """Write the reports into the results folder and onto the parent run, nesting the runs of the store under it
    (those of ``reused`` reports are in the tables, not the store)."""
    reused = reused or {}
    study, _ = gather(client, args.experiment, specs, reused)

    def recorded(record: RunRecord) -> Recorded | None:
        found = reused.get(record.name)
        return found if found is not None and found.record is record else None

    for record in (r for runs in study.values() for records in runs.values() for r in records):
        if recorded(record) is None:
            client.set_tag(record.run_id, PARENT_TAG, parent)
    out = Path(args.results_dir or Path("results") / args.experiment)
    several = len(study) > 1
    seeds = ", ".join(map(str, args.seeds))
    binned = true_count_methods(specs)
    reports = {}
    for config, env_id in dict.fromkeys((s.config, s.env_id) for s in specs):
        record_config_env(config)
        runs = study[env_id]
        snapshots, stages = {}, {}
        for method, records in runs.items():
            found = recorded(records[0]) if records else None
            saved = ({} if not records else load_snapshots(client, records[0].run_id) if found is None
                     else read_stages(found.folder, found.record.name))
            if saved:  # the lowest seed's: its last for the heatmaps, all four for the goal-statistics grid
                snapshots[method], stages[method] = saved[max(saved)], saved
        frames = sorted({r.frames for records in runs.values() for r in records})
        taken = [r.name for records in runs.values() for r in records if recorded(r) is not None]
        held = [r for records in runs.values() for r in records]
        context = [f"`{env_id}`, config `{config}`, MLflow experiment `{args.experiment}` (parent run `{parent}`), "
                   f"seeds {seeds_held(held) or seeds}, {' / '.join(map(str, frames)) or 'no'} env frames per run."
                   + (f" Runs as recorded in {', '.join(args.reuse)} (`--reuse`): {', '.join(taken)}." if taken else ""),
                   CELLS, *straight_line_context(env_id)]
        env_out = out / env_name(env_id) if several else out
        env_failed = [f for f in failed if f.startswith(env_name(env_id) + "-")]
        env_out.mkdir(parents=True, exist_ok=True)
        # the SVF of each method that selects goals (Random's learner has nothing to learn from its own goals)
        finals = {label(m): checkpoint_dir(args.experiment, records[0].name) / LAST for m, records in runs.items()
                  if records and records[0].goals_selected > 0}
        true_counts = {label(m): checkpoint_dir(args.experiment, records[0].name) / LAST for m, records in runs.items()
                       if records and m in binned}
        drawn, titles = checkpoint_figures(env_out, env_id, finals, true_counts)
        for path in drawn + write_report(env_out, env_id, runs, snapshots, context, env_failed, stages, titles):
            folder = path.parent.relative_to(out).as_posix()  # the report's own layout (snapshots/ in its folder)
            client.log_artifact(parent, str(path), None if folder == "." else folder)
        reports[env_id] = f"{env_name(env_id)}/report.md"
    if several:
        held = [r for runs in study.values() for records in runs.values() for r in records]
        context = [f"{len(study)} environments, MLflow experiment `{args.experiment}` (parent run `{parent}`), "
                   f"seeds {seeds_held(held) or seeds}" + (f", budgets × {args.budget_scale:g}" if args.budget_scale != 1 else "") + "."]
        for path in write_study(out, study, context, reports, failed):
            client.log_artifact(parent, str(path))
    client.set_terminated(parent, "FINISHED")
    print(f"report: {out / ('study.md' if several else 'report.md')}")
    return study


def console_table(runs: dict[str, list[RunRecord]]) -> str:
    """Per method: n and each column's mean, [95 % interval], (n)."""
    summary = summarize(runs)
    columns = list(next(iter(summary.values()), {}))
    lines = [f"{'method':<18s} {'n':>3s} " + " ".join(f"{c:>32s}" for c in columns)]
    for method, row in summary.items():
        cells = " ".join(f"{fmt(row[c]):>32s}" for c in columns)
        lines.append(f"{label(method):<18s} {len(runs[method]):>3d} {cells}")
    return "\n".join(lines)


def console_study(study: Study) -> str:
    """The improvements averaged over environments (LunarLanderFull apart, :mod:`~sun_lightning.results.domains`) with
    their 95 % intervals, a line per method."""
    relative = averaged_relative({env_id: summarize(runs) for env_id, runs in averaged(study).items()},
                                 list(dict.fromkeys(m for runs in study.values() for m in runs)))
    columns = list(next(iter(relative.values()), {}))
    lines = [f"{'method':<18s} " + " ".join(f"{c:>40s}" for c in columns)]
    lines += [f"{label(m):<18s} " + " ".join(f"{fmt_percent(row[c]):>40s}" for c in columns)
              for m, row in relative.items()]
    return "\n".join(lines)
