"""Copy the finished ``fit`` runs of one MLflow store's experiment into another store's experiment.

A study run on a machine that cannot reach your tracking store (``bench/gpu_study.sh`` brings its store back
as ``study.tar.gz``) joins the local study this way; ``python -m sun_lightning.compare ... --report-only``
then reports all runs together. Each run keeps its name, start time, tags (``hardware`` says where it ran),
params, full metric histories and artifacts; the tag ``copied_from`` names its origin.

Usage::

    mkdir gpu && tar xzf study.tar.gz -C gpu
    python bench/merge_mlflow.py gpu/mlruns/mlflow.db mlruns/mlflow.db compare-point_maze_s
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param

from sun_lightning.tracking.store import KIND_TAG


def copy_runs(src_db: Path, dst_db: Path, experiment: str) -> list[str]:
    """Copy ``experiment``'s finished fit runs from ``src_db`` to ``dst_db`` (SQLite stores); their names."""
    src, dst = mlflow.MlflowClient(f"sqlite:///{src_db.resolve()}"), mlflow.MlflowClient(f"sqlite:///{dst_db.resolve()}")
    found = src.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"error: no experiment {experiment!r} in {src_db}")
    target = dst.get_experiment_by_name(experiment)
    target_id = target.experiment_id if target else dst.create_experiment(experiment)
    copied = []
    for run in src.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'"):
        if run.data.tags.get(KIND_TAG) == "comparison":
            continue
        tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.") or k == "mlflow.runName"}
        tags["copied_from"] = f"{src_db} {run.info.run_id}"
        new = dst.create_run(target_id, start_time=run.info.start_time, tags=tags, run_name=run.info.run_name)
        run_id = new.info.run_id
        params = [Param(k, v) for k, v in run.data.params.items()]
        for i in range(0, len(params), 100):
            dst.log_batch(run_id, params=params[i:i + 100])
        metrics = [Metric(m.key, m.value, m.timestamp, m.step)
                   for key in run.data.metrics for m in src.get_metric_history(run.info.run_id, key)]
        for i in range(0, len(metrics), 1000):
            dst.log_batch(run_id, metrics=metrics[i:i + 1000])
        # The artifact URI names the folder on the machine that wrote it: read it under the store's own mlruns/.
        folder = src_db.parent / run.info.artifact_uri.split("/mlruns/", 1)[1]
        for name in sorted(os.listdir(folder)) if folder.is_dir() else ():
            path = folder / name
            if path.is_dir():
                dst.log_artifacts(run_id, str(path), name)
            else:
                dst.log_artifact(run_id, str(path))
        dst.set_terminated(run_id, run.info.status, end_time=run.info.end_time)
        copied.append(run.info.run_name)
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="the SQLite file of the store to copy from (…/mlruns/mlflow.db)")
    parser.add_argument("dst", type=Path, help="the SQLite file of the store to copy into")
    parser.add_argument("experiment")
    args = parser.parse_args()
    for name in copy_runs(args.src, args.dst, args.experiment):
        print("copied", name)


if __name__ == "__main__":
    main()
