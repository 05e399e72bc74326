"""Tidy tracking: run names and tags, one param per hyperparameter, and the run's pictures in MLflow."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import mlflow
import numpy as np
import pytest

from sun_lightning.run.cli import main
from sun_lightning.methods import METHODS, method_args
from sun_lightning.results.intervals import format_interval, mean_interval
from sun_lightning.results.report import write_report
from sun_lightning.results.runs import finished_runs
from sun_lightning.results.snapshot import HeatmapSnapshot
from sun_lightning.tracking.naming import env_name, git_commit, hardware, method_of, run_name
from sun_lightning.tracking.store import config_params

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def test_run_names_follow_env_method_seed():
    assert env_name("sun_lightning/FourRoomStuck-v0") == "FourRoomStuck"
    assert run_name("sun_lightning/FourRoomStuck-v0", "adagoal", 2) == "FourRoomStuck-adagoal-seed2"
    for method in METHODS:  # every method's selector names it back
        args = method_args(method)
        selector = "sun_lightning.goals.SUNAdaptive"  # the configs' default
        if "--data.selector" in args:
            selector = args[args.index("--data.selector") + 1]
        assert method_of(selector) == method
    assert method_of("sun_lightning.goals.sun.SUNAdaptive") == "sun" and method_of("my.rules.Curious") == "curious"
    # DISCOVER is one method on both variants: the paper's own code (DQN) and the official TD3 selection
    assert method_of("sun_lightning.goals.ensemble.DISCOVER") == "discover"
    assert method_of("sun_lightning.goals.discover.DISCOVERTD3") == "discover"
    assert method_of("sun_lightning.goals.ensemble.DISCOVERRaw") == "discover_raw"


def test_params_are_config_paths_without_internal_keys():
    tree = {"config": ["conf/x.yaml"], "seed_everything": 0,
            "model": {"class_path": "L", "init_args": {"lr": 0.001, "goal_space": None, "_instantiator": "x"}},
            "data": {"__path__": "d.yaml", "env_id": "E", "selector": {"class_path": "S", "init_args": {"k": 256}}}}
    assert config_params(tree, skip={"model.init_args.goal_space"}) == {
        "seed_everything": "0", "model.class_path": "L", "model.init_args.lr": "0.001", "data.env_id": "E",
        "data.selector.class_path": "S", "data.selector.init_args.k": "256"}


def test_a_fit_leaves_a_run_a_researcher_can_read(tmp_path, monkeypatch):
    """The MLflow run of a short fit: name, tags, de-duplicated params, heatmaps at each quarter, curves,
    config and checkpoint path, with numbers that agree with the logged metrics."""
    monkeypatch.chdir(tmp_path)
    # An absolute store: MLflow keeps one database engine per tracking URI in a process, so the default relative
    # URI would still point at the store of an earlier test's directory.
    store = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    main(["fit", "--config", str(ROOT / "conf/three_room.yaml"), "--data.total_frames", "800", "--data.warmup_frames",
          "600", "--data.num_envs", "2", "--metrics.log_every_frames", "200", "--metrics.verbose", "false",
          "--seed_everything", "1", "--trainer.logger.init_args.tracking_uri", store])
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    run_id = run.info.run_id
    assert run.info.run_name == "ThreeRoom-sun-seed1"
    tags = run.data.tags
    assert (tags["env"], tags["method"], tags["seed"]) == ("ThreeRoom", "sun", "1")
    assert tags["env_id"] == "sun_lightning/ThreeRoom-v0"
    assert tags["git_commit"] == git_commit() != ""
    assert tags["hardware"] == hardware() and tags["hardware"].startswith("cpu (")  # CI has no GPU

    params = run.data.params
    assert params["model.init_args.lr"] == "0.001" and params["data.env_id"] == "sun_lightning/ThreeRoom-v0"
    leaves = [key.rsplit(".", 1)[-1] for key in params]
    assert "lr" not in params and "_instantiator" not in params and leaves.count("lr") == 1
    assert not [key for key in params if "._" in key or key.startswith("_") or "__path__" in key]
    assert not [key for key in params if key.startswith("trainer.logger.init_args.tags")]
    assert "model.init_args.goal_space" not in params  # linked from data.env_id, not a setting

    def files(path=None):
        for item in client.list_artifacts(run_id, path):
            yield from files(item.path) if item.is_dir else [item.path]

    names = set(files())
    quarters = ["025", "050", "075", "100"]
    assert {f"heatmaps/heatmaps_{q}.{ext}" for q in quarters for ext in ("png", "npz")} | {
        "curves.png", "config.yaml", "checkpoint_path.txt"} == names
    download = tmp_path / "artifacts"
    for name in ("curves.png", "heatmaps/heatmaps_100.png"):
        assert Path(client.download_artifacts(run_id, name, str(download))).read_bytes()[:8] == PNG
    checkpoint = Path(client.download_artifacts(run_id, "checkpoint_path.txt", str(download))).read_text().strip()
    assert checkpoint.endswith(".ckpt") and Path(checkpoint).is_file()
    config = Path(client.download_artifacts(run_id, "config.yaml", str(download))).read_text()
    # the run's identity is in its name and tags, not in a config another seed may reuse
    assert "env_id: sun_lightning/ThreeRoom-v0" in config and "run_name: ThreeRoom-sun-seed1" not in config

    snapshots = {q: HeatmapSnapshot.load(client.download_artifacts(run_id, f"heatmaps/heatmaps_{q}.npz", str(download)))
                 for q in quarters}
    # D holds every frame so far: 200, 400, 600, 800 entries at the four quarters
    assert [snapshots[q].visits.sum() for q in quarters] == [200, 400, 600, 800]
    assert [snapshots[q].frames for q in quarters] == [200, 400, 600, 800]
    # goals are drawn after the warm-up (600 frames): the last quarter's goals are the last window's
    selected = {m.step: m.value for m in client.get_metric_history(run_id, "explore/goals/selected")}
    reached = {m.step: m.value for m in client.get_metric_history(run_id, "explore/goals/reached")}
    assert snapshots["050"].selected.sum() == 0 and selected[800] > 0
    assert snapshots["100"].selected.sum() == selected[800] and snapshots["100"].reached.sum() == reached[800]
    final = snapshots["100"]
    assert final.values.shape == (9, 8) and np.nanmax(final.values) <= 1.5 and final.start is not None
    assert np.isfinite(final.scores).sum() > 0  # the visited tiles' SUN scores

    # its wall-clock minutes and frames/s, on the run and in the comparison report's runs.csv beside its hardware
    minutes, fps = run.data.metrics["perf/run/minutes"], run.data.metrics["perf/run/frames_per_second"]
    assert 0 < minutes < 10 and fps == pytest.approx(800 / (60 * minutes), rel=1e-6)
    # the CPU it had: one torch thread and the env loop on a quiet core make about 1; it cannot exceed the cores
    assert 0 < run.data.metrics["perf/run/cpu_share"] <= os.cpu_count()
    record = finished_runs(client, "sun_lightning")["ThreeRoom-sun-seed1"]
    write_report(tmp_path / "report", "sun_lightning/ThreeRoom-v0", {"sun": [record]}, {})
    (row,) = csv.DictReader(open(tmp_path / "report/runs.csv"))
    assert float(row["minutes"]) == pytest.approx(minutes, rel=1e-5) and row["hardware"] == hardware()
    shown = format_interval(mean_interval([minutes]), 1)  # 0.0612 (n = 1): three significant figures below 0.1
    assert shown.endswith("(n = 1)") and f"| SUN adaptive | {shown} |" in (tmp_path / "report/report.md").read_text()


def test_without_mlflow_the_results_callback_stays_out_of_the_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / "conf/three_room.yaml"), "--data.total_frames", "640",
                "--data.warmup_frames", "600", "--data.num_envs", "2", "--metrics.verbose", "false",
                "--trainer.logger", "false", "--trainer.enable_checkpointing", "false"])
    results = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "ResultsLogger")
    assert results._loggers == [] and not list(tmp_path.rglob("*.png"))
