"""``bench/merge_mlflow.py``: a study's finished runs, written on another machine, join the local store with their
whole metric histories, tags, params and artifacts, read from the store's own folder (the artifact URI names the
folder on the machine that wrote it); unfinished runs and comparison parents stay behind."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import mlflow

from sun_lightning.tracking.store import KIND_TAG

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

EXPERIMENT = "compare-point_maze_s"


def _store(root: Path) -> mlflow.MlflowClient:
    (root / "mlruns").mkdir(parents=True)
    client = mlflow.MlflowClient(f"sqlite:///{root}/mlruns/mlflow.db")
    client.create_experiment(EXPERIMENT, artifact_location=str(root / "mlruns" / "1"))
    return client


def test_finished_runs_move_with_histories_and_artifacts(tmp_path):
    from merge_mlflow import copy_runs

    remote = tmp_path / "remote"
    src = _store(remote)
    exp = src.get_experiment_by_name(EXPERIMENT).experiment_id
    run = src.create_run(exp, run_name="PointMazeS-discover-seed1", tags={"method": "discover", "seed": "1",
                                                                           "hardware": "cuda (NVIDIA H100)"})
    rid = run.info.run_id
    for step, value in ((2000, 0.01), (4000, 0.03), (6000, 0.02)):
        src.log_metric(rid, "explore/visits/coverage", value, step=step)
    src.log_param(rid, "data.total_frames", "20000")
    (tmp_path / "heatmaps_100.npz").write_bytes(b"snapshot")
    src.log_artifact(rid, str(tmp_path / "heatmaps_100.npz"), "heatmaps")
    src.set_terminated(rid, "FINISHED")
    killed = src.create_run(exp, run_name="PointMazeS-adagoal-seed1")
    src.set_terminated(killed.info.run_id, "KILLED")
    parent = src.create_run(exp, run_name="PointMazeS-comparison", tags={KIND_TAG: "comparison"})
    src.set_terminated(parent.info.run_id, "FINISHED")
    # brought back to another folder, as bench/gpu_study.sh's tarball is
    moved = tmp_path / "brought_back"
    shutil.copytree(remote, moved)
    shutil.rmtree(remote)

    dst = _store(tmp_path / "local")
    assert copy_runs(moved / "mlruns" / "mlflow.db", tmp_path / "local" / "mlruns" / "mlflow.db",
                     EXPERIMENT) == ["PointMazeS-discover-seed1"]
    (copied,) = dst.search_runs([dst.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert copied.info.run_name == "PointMazeS-discover-seed1" and copied.info.status == "FINISHED"
    assert copied.data.tags["hardware"] == "cuda (NVIDIA H100)" and copied.data.tags["seed"] == "1"
    assert copied.data.params["data.total_frames"] == "20000"
    history = dst.get_metric_history(copied.info.run_id, "explore/visits/coverage")
    assert sorted((m.step, m.value) for m in history) == [(2000, 0.01), (4000, 0.03), (6000, 0.02)]
    assert [a.path for a in dst.list_artifacts(copied.info.run_id, "heatmaps")] == ["heatmaps/heatmaps_100.npz"]
    path = dst.download_artifacts(copied.info.run_id, "heatmaps/heatmaps_100.npz", str(tmp_path / "dl"))
    assert Path(path).read_bytes() == b"snapshot"
