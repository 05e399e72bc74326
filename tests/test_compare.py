"""The paper's comparison: method overrides and the runner's table (sun_lightning.compare)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from sun_lightning import compare
from sun_lightning.cli import main
from sun_lightning.methods import METHODS, method_args

ROOT = Path(compare.__file__).resolve().parents[1]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_is_a_valid_override(method, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["--config", str(ROOT / "conf/three_room.yaml"),
                *method_args(method), "--trainer.logger", "false"], run=False)
    selector = type(cli.datamodule.selector).__name__
    expected = {"sun": "SUNAdaptive", "sun_per_step": "SUNPerStep", "sun_episodic": "SUNEpisodic",
                "sun_additive": "SUNAdditive", "novelty_only": "NoveltyOnly", "reachability_only": "ReachabilityOnly",
                "discover": "DISCOVER", "adagoal": "AdaGoal", "random": "RandomActions"}[method]
    assert selector == expected
    ensemble = type(cli.model).__name__ == "EnsembleDQNSVF"
    assert ensemble == (method in ("discover", "adagoal"))


def test_unknown_method_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown method 'sun_adaptive'.*sun_episodic"):
        method_args("sun_adaptive")


def _log_run(client, experiment_id, name, coverage, entropy, frames, status="FINISHED"):
    run = client.create_run(experiment_id, run_name=name)
    for step, fraction in ((frames // 2, 0.5), (frames, 1.0)):
        client.log_metric(run.info.run_id, "explore/visits/coverage", coverage * fraction, step=step)
        client.log_metric(run.info.run_id, "explore/visits/entropy", entropy * fraction, step=step)
    client.set_terminated(run.info.run_id, status)


def test_report_gives_mean_and_std_over_finished_seeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    client = mlflow.MlflowClient(compare.MLFLOW_URI)
    experiment = client.create_experiment("cmp")
    _log_run(client, experiment, "sun-seed0", 0.9, 0.8, 1000)
    _log_run(client, experiment, "sun-seed1", 0.7, 0.6, 1000)
    _log_run(client, experiment, "sun-seed2", 0.1, 0.1, 500, status="FAILED")  # not counted
    _log_run(client, experiment, "random-seed0", 0.5, 0.4, 800)
    done = compare.finished_runs("cmp")
    assert set(done) == {"sun-seed0", "sun-seed1", "random-seed0"}
    assert done["random-seed0"]["frames"] == 800
    args = compare.argparse.Namespace(experiment="cmp", methods=["sun", "random", "adagoal"], seeds=[0, 1, 2])
    table = {line.split()[0]: line.split() for line in compare.report(args).splitlines()[1:]}
    # sun: two finished seeds, coverage 0.8 ± 0.141 (sample std), entropy 0.7 ± 0.141
    assert table["sun"][1:8] == ["2", "1000", "0.800", "±", "0.141", "0.700", "±"]
    assert table["random"][1:5] == ["1", "800", "0.500", "±"]
    assert table["adagoal"][1:3] == ["0", "0"]
    # AUC over (500, 0.45), (1000, 0.9) and (500, 0.35), (1000, 0.7): 0.675 and 0.525, mean 0.6 ± 0.106
    assert table["sun"][9:] == ["—", "—", "0.600", "±", "0.106", "0.525", "±", "0.106"]


def test_bad_arguments_fail_fast(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sun_lightning.compare", "--config", "conf/nope.yaml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "config file not found: conf/nope.yaml" in result.stderr
    result = subprocess.run([sys.executable, "-m", "sun_lightning.compare", "--config", "x.yaml", "--methods", "sun_fast"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "invalid choice: 'sun_fast'" in result.stderr


@pytest.mark.slow
def test_a_small_comparison_runs_end_to_end_and_resumes(tmp_path):
    command = [sys.executable, "-m", "sun_lightning.compare", "--config", str(ROOT / "conf/three_room.yaml"),
               "--methods", "sun", "random", "--seeds", "0", "--jobs", "2", "--experiment", "e2e",
               "--", "--data.total_frames", "600", "--data.warmup_frames", "400", "--metrics.log_every_frames", "200"]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "started sun-seed0" in first.stdout and "random-seed0 finished" in first.stdout
    rows = {line.split()[0]: line.split() for line in first.stdout.splitlines() if line.startswith(("sun ", "random "))}
    assert rows["sun"][1:3] == ["1", "600"] and rows["random"][1:3] == ["1", "600"]
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "started" not in second.stdout  # finished runs are not repeated


@pytest.mark.parametrize("method", ["discover", "adagoal", "sun"])
def test_ensembles_follow_the_configs_learner(method, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ROOT / "conf/point_maze_s.yaml"
    cli = main(["--config", str(config), *method_args(method, config), "--trainer.logger", "false"], run=False)
    expected = {"discover": "EnsembleTD3SVF", "adagoal": "EnsembleTD3SVF", "sun": "TD3SVF"}[method]
    assert type(cli.model).__name__ == expected
    if method == "discover":
        assert cli.datamodule.selector.beta == 1.0  # β = 1 on GCRL control (paper appendix)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_on_point_maze_s(method, tmp_path, monkeypatch):
    """Every method of the paper runs on the TD3 variant too (issue 17), at a tiny budget."""
    monkeypatch.chdir(tmp_path)
    config = ROOT / "conf/point_maze_s.yaml"
    cli = main(["fit", "--config", str(config), *method_args(method, config), "--data.total_frames", "1064",
                "--data.warmup_frames", "1000", "--data.num_envs", "2", "--metrics.verbose", "false",
                "--metrics.log_every_frames", "1000", "--trainer.logger", "false",
                "--trainer.enable_checkpointing", "false", "--seed_everything", "0"])
    assert cli.datamodule.frames == 1064
    assert cli.model.updates == (0 if method == "random" else 16)
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    assert 0 < logger.final["explore/visits/coverage"] <= 1
