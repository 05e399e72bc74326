"""The paper's comparison: method overrides and the runner's table (sun_lightning.compare)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch

from sun_lightning import compare
from sun_lightning.run.cli import main
from sun_lightning.methods import METHODS, method_args
from sun_lightning.study.report import gather
from sun_lightning.results.runs import finished_runs
from sun_lightning.tracking.store import local_store_uri

ROOT = Path(compare.__file__).resolve().parents[1]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_is_a_valid_override(method, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["--config", str(ROOT / "conf/three_room.yaml"),
                *method_args(method), "--trainer.logger", "false"], run=False)
    selector = type(cli.datamodule.config.selector).__name__
    expected = {"sun": "SUNAdaptive", "sun_per_step": "SUNPerStep", "sun_episodic": "SUNEpisodic",
                "sun_additive": "SUNAdditive", "novelty_only": "NoveltyOnly", "reachability_only": "ReachabilityOnly",
                "discover": "DISCOVER", "discover_raw": "DISCOVERRaw", "adagoal": "AdaGoal",
                "mega": "MEGA", "mega_pseudocount": "MEGACount", "random": "RandomActions"}[method]
    assert selector == expected
    ensemble = type(cli.model).__name__ == "EnsembleDQNSVF"
    assert ensemble == (method in ("discover", "discover_raw", "adagoal"))
    if method.startswith("discover"):
        assert cli.datamodule.config.selector.beta == 10.0  # the DQN variant's DISCOVER: the paper's own code


def test_unknown_method_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown method 'sun_adaptive'.*sun_episodic"):
        method_args("sun_adaptive")


def _log_run(client, experiment_id, name, coverage, entropy, frames, status="FINISHED", tags=None):
    run = client.create_run(experiment_id, run_name=name, tags=tags or {})
    for step, fraction in ((frames // 2, 0.5), (frames, 1.0)):
        client.log_metric(run.info.run_id, "explore/visits/coverage", coverage * fraction, step=step)
        client.log_metric(run.info.run_id, "explore/visits/entropy", entropy * fraction, step=step)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_finished_runs_are_read_back_with_their_curves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    client = mlflow.MlflowClient(local_store_uri())
    experiment = client.create_experiment("cmp")
    _log_run(client, experiment, "ThreeRoom-sun-seed0", 0.9, 0.8, 1000, tags={"method": "sun", "seed": "0"})
    _log_run(client, experiment, "ThreeRoom-sun-seed1", 0.7, 0.6, 1000)  # identity from the name
    _log_run(client, experiment, "ThreeRoom-sun-seed2", 0.1, 0.1, 500, status="FAILED")  # not counted
    _log_run(client, experiment, "ThreeRoom-random-seed0", 0.5, 0.4, 800)
    _log_run(client, experiment, "ThreeRoom-comparison", 0.5, 0.4, 800, tags={"kind": "comparison"})  # a parent
    done = finished_runs(client, "cmp")
    assert set(done) == {"ThreeRoom-sun-seed0", "ThreeRoom-sun-seed1", "ThreeRoom-random-seed0"}
    assert (done["ThreeRoom-sun-seed1"].method, done["ThreeRoom-sun-seed1"].seed) == ("sun", 1)
    assert done["ThreeRoom-random-seed0"].frames == 800
    # AUC over (500, 0.45), (1000, 0.9): the mean height (0.45 + 0.9) / 2
    assert done["ThreeRoom-sun-seed0"].auc("explore/visits/coverage") == pytest.approx(0.675)
    specs = compare.plan([str(ROOT / "conf/three_room.yaml")], ["sun", "random", "adagoal"], {}, [0, 1, 2])
    study, missing = gather(client, "cmp", specs)
    runs = study["sun_lightning/ThreeRoom-v0"]
    assert [r.seed for r in runs["sun"]] == [0, 1] and runs["adagoal"] == []
    assert set(missing) == {"ThreeRoom-sun-seed2", "ThreeRoom-random-seed1", "ThreeRoom-random-seed2",
                            "ThreeRoom-adagoal-seed0", "ThreeRoom-adagoal-seed1", "ThreeRoom-adagoal-seed2"}


def test_a_failing_run_fails_the_comparison_by_name(tmp_path, monkeypatch, capsys):
    """One run fails (an unknown selection rule), one finishes: the report covers the finished one, nests it
    under the comparison's parent run, and the runner exits 1 naming the failed run."""
    monkeypatch.chdir(tmp_path)
    real = compare.method_args
    monkeypatch.setattr(compare, "method_args", lambda method, config=None: (
        ("--data.selector", "sun_lightning.goals.NoSuchRule") if method == "sun" else real(method, config)))
    with pytest.raises(SystemExit) as exited:
        compare.main(["--config", str(ROOT / "conf/three_room.yaml"), "--methods", "sun", "random", "--seeds", "0",
                      "--jobs", "2", "--experiment", "cmp", "--", "--data.total_frames", "640", "--data.warmup_frames",
                      "600", "--data.num_envs", "2", "--metrics.log_every_frames", "320", "--metrics.verbose", "false"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "1 run(s) failed: ThreeRoom-sun-seed0 (exit " in err and "random" not in err
    report = (tmp_path / "results/cmp/report.md").read_text()
    # the first row of a label is the summary table's
    table = {label: next(line for line in report.splitlines() if line.startswith(f"| {label} |")).split("|")[2:-1]
             for label in ("SUN adaptive", "Random")}
    table = {label: [cell.strip() for cell in cells] for label, cells in table.items()}
    assert table["SUN adaptive"][0] == "0" and set(table["SUN adaptive"][2:]) == {"n/a"}
    assert table["Random"][:2] == ["1", "640"] and table["Random"][-1] == "n/a"  # goal success of Random
    assert table["Random"][2].endswith("(n = 1)") and "[" not in table["Random"][2]  # n = 1: no interval
    assert "Runs that failed (not in the tables): ThreeRoom-sun-seed0" in report
    client = mlflow.MlflowClient(local_store_uri())
    child = finished_runs(client, "cmp")["ThreeRoom-random-seed0"]
    parent = client.get_run(client.get_run(child.run_id).data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "ThreeRoom-comparison" and parent.data.tags["kind"] == "comparison"
    # no svf.png: the finished run is Random's, whose rule selects no goals; its record and snapshots kept beside
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
        "report.md", "summary.csv", "runs.csv", "curves.png", "heatmaps.png", "runs.json.gz", "snapshots"}
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "snapshots")} == {
        f"snapshots/ThreeRoom-random-seed0_{p:03d}.npz" for p in (25, 50, 75, 100)}


def test_bad_arguments_fail_fast(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sun_lightning.compare", "--config", "conf/nope.yaml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "config file not found: conf/nope.yaml" in result.stderr
    result = subprocess.run([sys.executable, "-m", "sun_lightning.compare", "--config", "x.yaml", "--methods", "sun_fast"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "invalid choice: 'sun_fast'" in result.stderr


def test_bad_arguments_are_refused_before_torch_and_mlflow_load(tmp_path):
    """The runner checks its arguments before it imports the training stack, so a typo is answered at once."""
    probe = ("import sys\nfrom sun_lightning import compare\ntry:\n    compare.main(['--config', 'nope.yaml'])\n"
             "except SystemExit as stop:\n    print(stop.code, sorted(m for m in ('torch', 'mlflow', 'lightning') "
             "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["2", "[]"], result.stdout + result.stderr


@pytest.mark.slow
def test_a_small_comparison_runs_end_to_end_and_resumes(tmp_path):
    command = [sys.executable, "-m", "sun_lightning.compare", "--config", str(ROOT / "conf/three_room.yaml"),
               "--methods", "sun", "random", "--seeds", "0", "--jobs", "2", "--experiment", "e2e",
               "--", "--data.total_frames", "600", "--data.warmup_frames", "400", "--metrics.log_every_frames", "200"]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "started ThreeRoom-sun-seed0" in first.stdout and "ThreeRoom-random-seed0 finished" in first.stdout
    summary = {row["method"]: row for row in csv.DictReader(open(tmp_path / "results/e2e/summary.csv"))}
    assert summary["sun"]["n"] == summary["random"]["n"] == "1" and summary["sun"]["frames"] == "600"
    # SUN's learned V(s, g), its learner rebuilt from the checkpoint fit wrote (Random selects no goals: no panel)
    assert (tmp_path / "results/e2e/svf.png").is_file() and "(svf.png)" in (tmp_path / "results/e2e/report.md").read_text()
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "started" not in second.stdout  # finished runs are not repeated


@pytest.mark.slow  # 70 s: a runner and its fits, stopped and waited for
def test_stopping_the_runner_stops_its_runs_with_checkpoints(tmp_path):
    """SIGTERM (as Ctrl-C) on the runner: both running runs save a checkpoint past their warm-up (200 frames) and stop, no run
    starts after it, the MLflow runs are KILLED (not FINISHED), and the runner exits 130 saying how to resume."""
    names = ["ThreeRoom-sun-seed0", "ThreeRoom-sun-seed1"]
    runner = subprocess.Popen(
        [sys.executable, "-m", "sun_lightning.compare", "--config", str(ROOT / "conf/three_room.yaml"),
         "--methods", "sun", "--seeds", "0", "1", "2", "--jobs", "2", "--experiment", "stop", "--",
         "--data.total_frames", "1000000", "--data.warmup_frames", "200", "--data.num_envs", "4",
         "--metrics.log_every_frames", "200", "--trainer.enable_progress_bar", "false"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = [tmp_path / "mlruns/logs/stop" / f"{name}.log" for name in names]
    deadline = time.monotonic() + 300
    while not all(log.is_file() and "[frames 400]" in log.read_text() for log in logs):
        assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
        time.sleep(0.5)
    runner.send_signal(signal.SIGTERM)
    out, err = runner.communicate(timeout=180)
    assert runner.returncode == 130, out + err
    assert "interrupted: stopped 2 run(s)" in err and "the same command resumes the study" in err
    assert "seed2" not in out  # nothing started after the stop
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("stop").experiment_id])
    assert sorted(r.info.run_name for r in runs if r.info.run_name in names) == names
    assert {r.info.status for r in runs if r.info.run_name in names} == {"KILLED"}
    for name, log in zip(names, logs):
        assert "interrupted: saving a checkpoint and stopping" in log.read_text()
        checkpoint = tmp_path / "checkpoints/stop" / name / "last.ckpt"
        frames = torch.load(checkpoint, weights_only=False, map_location="cpu")["ExplorationDataModule"]["frames"]
        assert 400 <= frames < 1_000_000


@pytest.mark.slow  # about a minute: a runner and its fit, the fit stopped from outside
def test_a_run_killed_beside_the_runner_stops_the_study_with_its_checkpoint(tmp_path):
    """SIGTERM on a run's own ``fit`` process (``kill``, the system): the run saves a checkpoint and exits 143; the
    runner names it stopped with its checkpoint's frames (not finished), starts no other run, and exits 130."""
    name = "ThreeRoom-sun-seed0"
    runner = subprocess.Popen(
        [sys.executable, "-m", "sun_lightning.compare", "--config", str(ROOT / "conf/three_room.yaml"),
         "--methods", "sun", "--seeds", "0", "1", "--jobs", "1", "--experiment", "kill", "--",
         "--data.total_frames", "1000000", "--data.warmup_frames", "200", "--data.num_envs", "4",
         "--metrics.log_every_frames", "200", "--trainer.enable_progress_bar", "false"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "mlruns/logs/kill" / f"{name}.log"
    deadline = time.monotonic() + 300
    while not (log.is_file() and "[frames 400]" in log.read_text()):
        assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
        time.sleep(0.5)
    (fit,) = [int(pid) for task in Path(f"/proc/{runner.pid}/task").iterdir()
              for pid in (task / "children").read_text().split()]
    os.kill(fit, signal.SIGTERM)
    out, err = runner.communicate(timeout=180)
    assert runner.returncode == 130, out + err
    assert f"{name} stopped by SIGTERM after " in out and "the same command resumes it" in out
    assert "finished" not in out and "seed1" not in out
    assert "interrupted by SIGTERM: saving a checkpoint and stopping" in log.read_text()
    frames = torch.load(tmp_path / "checkpoints/kill" / name / "last.ckpt", weights_only=False,
                        map_location="cpu")["ExplorationDataModule"]["frames"]
    assert 400 <= frames < 1_000_000 and f"checkpoint at {frames} frames in checkpoints/kill/{name}" in out
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("kill").experiment_id], f"attributes.run_name = '{name}'")
    assert run.info.status == "KILLED"


@pytest.mark.parametrize("config", ["point_maze_s", "antmaze"])
@pytest.mark.parametrize("method", ["discover", "discover_raw", "adagoal", "sun", "mega", "mega_pseudocount"])
def test_ensembles_follow_the_configs_learner(method, config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ROOT / f"conf/{config}.yaml"
    cli = main(["--config", str(config), *method_args(method, config), "--trainer.logger", "false"], run=False)
    expected = {"discover": "EnsembleTD3SVF", "discover_raw": "EnsembleTD3SVF", "adagoal": "EnsembleTD3SVF",
                "sun": "TD3SVF", "mega": "TD3SVF", "mega_pseudocount": "TD3SVF"}[method]
    assert type(cli.model).__name__ == expected
    selector = cli.datamodule.config.selector
    if method == "discover":  # the official TD3 code's selection, its presets' pool size
        assert type(selector).__name__ == "DISCOVERTD3"
        assert selector.num_candidates == (10000 if config.stem == "antmaze" else 5000)
    if method.startswith("mega"):  # DISCOVER's MEGA: the same pool, and a KDE fitted on as many achieved goals
        assert type(selector).__name__ == {"mega": "MEGATD3", "mega_pseudocount": "MEGACountTD3"}[method]
        assert selector.num_candidates == selector.kde_samples == (10000 if config.stem == "antmaze" else 5000)
    if method == "discover_raw":
        assert type(selector).__name__ == "DISCOVERRaw" and selector.beta == 1.0  # β = 1 on GCRL control (paper appendix)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_on_point_maze_s(method, tmp_path, monkeypatch):
    """Every method of the paper runs on the TD3 variant too, at a tiny budget (small networks: the wiring is tested,
    the paper's sizes are trained by tests/integration/test_train_all_envs.py)."""
    monkeypatch.chdir(tmp_path)
    config = ROOT / "conf/point_maze_s.yaml"
    small = [f"--model.init_args.{name}={value}" for name, value in
             {"hidden": 32, "maxout_width": 64, "head_width": 32, "batch_size": 32}.items()]
    cli = main(["fit", "--config", str(config), *method_args(method, config), *small, "--data.total_frames", "1064",
                "--data.warmup_frames", "1000", "--data.num_envs", "2", "--metrics.verbose", "false",
                "--metrics.log_every_frames", "1000", "--trainer.logger", "false",
                "--trainer.enable_checkpointing", "false", "--seed_everything", "0"])
    assert cli.datamodule.exploration.frames == 1064
    assert cli.model.updates == (0 if method == "random" else 16)
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    assert 0 < logger.final["explore/visits/coverage"] <= 1
