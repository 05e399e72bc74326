"""The paper's study as one command: several environments, grid variants, budget scaling, the report
across environments, resuming, and Ray (a local cluster, a killed worker)."""

from __future__ import annotations

import csv
import os
import re
import signal
import threading
import time
from pathlib import Path

import mlflow
import pytest

from sun_lightning import compare
from sun_lightning.envs.registry import goal_space
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.results.runs import SELECTED, finished_runs
from sun_lightning.study import local
from sun_lightning.study import plan as plan_module
from sun_lightning.study.plan import budget_args, parse_grid, plan
from sun_lightning.study.ray_launcher import MISSING
from sun_lightning.tracking.store import local_store_uri
from tests.helpers import write_run_checkpoint

ROOT = Path(compare.__file__).resolve().parents[1]
THREE_ROOM, MOUNTAIN_CAR = str(ROOT / "conf/three_room.yaml"), str(ROOT / "conf/mountain_car.yaml")
#: A ThreeRoom run of a few seconds: 1 learning step after the warm-up, 2 points per curve.
TINY = ("--data.total_frames", "640", "--data.warmup_frames", "600", "--data.num_envs", "2",
        "--metrics.log_every_frames", "320", "--checkpoint.every_frames", "320", "--metrics.verbose", "false",
        "--trainer.enable_progress_bar", "false")


def test_grid_variants_are_methods_named_by_their_values():
    grid = parse_grid(["data.rho=0.01,0.5", "data.counts=binned"])
    assert grid == {"rho=0.01": ("--data.rho", "0.01"), "rho=0.5": ("--data.rho", "0.5"),
                    "counts=binned": ("--data.counts", "binned")}
    specs = plan([MOUNTAIN_CAR], ["random"], grid, [3])
    assert [s.name for s in specs] == ["MountainCar-random-seed3", "MountainCar-rho=0.01-seed3",
                                       "MountainCar-rho=0.5-seed3", "MountainCar-counts=binned-seed3"]
    assert specs[1].method_args == ("--data.rho", "0.01")  # SUN adaptive (the config's default) with the override
    for bad in ("data.rho", "=0.1", "data.rho=0.1,,0.2", "--data.rho=0.1"):
        with pytest.raises(ValueError, match="--grid takes KEY=V1,V2"):
            parse_grid([bad])


def test_budget_scale_shrinks_every_period_to_whole_vector_steps():
    # mountain_car.yaml: 40000 frames, 4 envs, warm-up 10000, logging every 5000; checkpoints every 10000 (default)
    assert budget_args(MOUNTAIN_CAR, 0.1) == ("--data.total_frames", "4000", "--data.warmup_frames", "1000",
                                              "--metrics.log_every_frames", "500", "--checkpoint.every_frames", "1000")
    # point_maze_s.yaml: 16 envs, so 20000 × 0.013 = 260 → 256 and the warm-up 1000 × 0.013 = 13 → one step, 16
    assert budget_args(ROOT / "conf/point_maze_s.yaml", 0.013)[:4] == (
        "--data.total_frames", "256", "--data.warmup_frames", "16")
    assert budget_args(MOUNTAIN_CAR, 1.0) == ()


def test_the_paper_suite_is_fourteen_configs_and_four_methods():
    assert len(plan_module.PAPER_CONFIGS) == 14 and all((ROOT / c).is_file() for c in plan_module.PAPER_CONFIGS)
    assert len({compare.config_env_id(ROOT / c) for c in plan_module.PAPER_CONFIGS}) == 14
    assert plan_module.PAPER_METHODS == ("sun", "discover", "adagoal", "random")


def _log_run(client, experiment_id, name, method, seed, coverage, entropy, frames=1000):
    """A finished run whose curves are (frames/2, value/2), (frames, value): AUC = 0.75 · value."""
    run = client.create_run(experiment_id, run_name=name, tags={"method": method, "seed": str(seed)})
    for step, fraction in ((frames // 2, 0.5), (frames, 1.0)):
        client.log_metric(run.info.run_id, "explore/visits/coverage", coverage * fraction, step=step)
        client.log_metric(run.info.run_id, "explore/visits/entropy", entropy * fraction, step=step)
        if method != "random":
            client.log_metric(run.info.run_id, SELECTED, 10.0, step=step)
    client.set_terminated(run.info.run_id, "FINISHED")


#: (env, method, seed) → (final coverage, final entropy) of the hand-made study.
FINALS = {("ThreeRoom", "sun", 0): (0.8, 0.9), ("ThreeRoom", "sun", 1): (0.6, 0.7),
          ("ThreeRoom", "random", 0): (0.4, 0.6), ("ThreeRoom", "random", 1): (0.2, 0.6),
          ("MountainCar", "sun", 0): (0.5, 0.4), ("MountainCar", "sun", 1): (0.5, 0.6),
          ("MountainCar", "random", 0): (0.6, 0.5), ("MountainCar", "random", 1): (0.4, 0.5)}


def test_a_study_reports_across_environments_and_resumes_only_the_missing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    client = mlflow.MlflowClient(local_store_uri())
    experiment = client.create_experiment("st")
    missing = ("MountainCar", "random", 1)
    for (env, method, seed), (coverage, entropy) in FINALS.items():
        if (env, method, seed) != missing:
            _log_run(client, experiment, f"{env}-{method}-seed{seed}", method, seed, coverage, entropy)
    launched = []

    def fake_local(specs, experiment_name, uri, extra, log_dir, jobs, threads, on_finished, gpus=None):
        """The launcher's contract without processes: run what it is given, log it, call back."""
        for spec in specs:
            launched.append((spec.name, extra(spec)))
            env, method, seed = missing
            _log_run(client, experiment, spec.name, method, seed, *FINALS[missing])
            on_finished(spec.name)
        return []

    monkeypatch.setattr(local, "run_local", fake_local)
    # one final checkpoint beside the study (MountainCar's SUN, seed 0): its learned V(s, g) is drawn
    (tmp_path / "checkpoints/st/MountainCar-sun-seed0").mkdir(parents=True)
    write_run_checkpoint(tmp_path / "checkpoints/st/MountainCar-sun-seed0/last.ckpt", "sun_lightning/MountainCar-v0",
                         DQNSVF(goal_space=goal_space("sun_lightning/MountainCar-v0")))
    compare.main(["--configs", THREE_ROOM, MOUNTAIN_CAR, "--methods", "sun", "random", "--seeds", "0", "1",
                  "--experiment", "st", "--budget-scale", "0.1", "--", "--trainer.logger.init_args.log_model", "false"])
    assert "(svf.png)" in (tmp_path / "results/st/MountainCar/report.md").read_text()
    assert (tmp_path / "results/st/MountainCar/svf.png").is_file() and not (tmp_path / "results/st/ThreeRoom/svf.png").exists()
    # only the missing run, with the scaled budget and the user's arguments last
    assert launched == [("MountainCar-random-seed1", budget_args(MOUNTAIN_CAR, 0.1)
                         + ("--trainer.logger.init_args.log_model", "false"))]
    # by hand: AUC = 0.75 · final; averaged over the two seeds, then over the two envs
    auc = {key: (0.75 * coverage, 0.75 * entropy) for key, (coverage, entropy) in FINALS.items()}

    def env_mean(env, method, metric):
        return (auc[(env, method, 0)][metric] + auc[(env, method, 1)][metric]) / 2

    expected = {}
    for metric, column in ((0, "coverage_auc_vs_random_pct"), (1, "entropy_auc_vs_random_pct")):
        sun = (env_mean("ThreeRoom", "sun", metric) + env_mean("MountainCar", "sun", metric)) / 2
        rnd = (env_mean("ThreeRoom", "random", metric) + env_mean("MountainCar", "random", metric)) / 2
        expected[column] = 100 * (sun - rnd) / rnd
    assert expected["coverage_auc_vs_random_pct"] == pytest.approx(50.0)  # (0.45 − 0.3) / 0.3
    rows = {row["method"]: row for row in csv.DictReader(open(tmp_path / "results/st/study.csv"))}
    for column, value in expected.items():
        assert float(rows["sun"][column]) == pytest.approx(value, rel=1e-5)
        assert rows["random"][column] == "n/a"  # a baseline against itself
    assert rows["sun"]["envs"] == "2"
    study_md = (tmp_path / "results/st/study.md").read_text()
    assert "| SUN adaptive | 2 | +50.0 % [" in study_md and "[ThreeRoom](ThreeRoom/report.md)" in study_md
    for path in ("study.md", "curves_grid.png", "improvement_bars.png", "ThreeRoom/report.md",
                 "MountainCar/summary.csv", "MountainCar/curves.png"):
        assert (tmp_path / "results/st" / path).is_file(), path
    per_env = {row["method"]: row for row in csv.DictReader(open(tmp_path / "results/st/MountainCar/summary.csv"))}
    assert per_env["random"]["n"] == "2"
    out = capsys.readouterr().out
    assert "relative AUC improvement averaged over 2 environments" in out and "+50.0 %" in out
    parent = client.get_run(client.get_run(finished_runs(client, "st")["ThreeRoom-sun-seed0"].run_id)
                            .data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "st-study" and parent.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"study.md", "study.csv", "curves_grid.png", "improvement_bars.png", "ThreeRoom", "MountainCar"} <= artifacts
    # a second invocation finds every run finished and launches nothing
    launched.clear()
    compare.main(["--configs", THREE_ROOM, MOUNTAIN_CAR, "--methods", "sun", "random", "--seeds", "0", "1",
                  "--experiment", "st"])
    assert launched == []


def test_ray_without_ray_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # import ray → ImportError
    with pytest.raises(SystemExit) as exited:
        compare.main(["--config", THREE_ROOM, "--methods", "random", "--launcher", "ray"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"error: {MISSING}\n" and "[ray]" in MISSING


@pytest.fixture(scope="module")
def ray_cluster():
    import ray  # the test extra installs Ray: these tests run in CI

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _summary(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(path)))


@pytest.mark.slow  # 80 s: a Ray cluster and two fits
def test_ray_gives_the_report_of_local_processes(ray_cluster, tmp_path, monkeypatch):
    """One run per launcher (the default suite's share; the study of two configs, methods and seeds is below)."""
    monkeypatch.chdir(tmp_path)
    study = ["--config", THREE_ROOM, "--methods", "sun", "--seeds", "0"]
    compare.main([*study, "--jobs", "2", "--experiment", "local", "--", *TINY])
    compare.main([*study, "--launcher", "ray", "--experiment", "ray", "--", *TINY])
    local, on_ray = _summary(tmp_path / "results/local/summary.csv"), _summary(tmp_path / "results/ray/summary.csv")
    assert [(row["method"], row["n"], row["frames"]) for row in on_ray] == [("sun", "1", "640")]
    assert on_ray == local
    client = mlflow.MlflowClient(local_store_uri())
    assert set(finished_runs(client, "ray")) == {"ThreeRoom-sun-seed0"}
    # the checkpoints of a compared run are checkpoints/<experiment>/<run>/, not one folder deeper
    assert (tmp_path / "checkpoints/ray/ThreeRoom-sun-seed0/last.ckpt").is_file()


@pytest.mark.slow
def test_a_two_config_study_on_ray_reports_as_local_processes_and_averages_by_hand(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = ["--configs", THREE_ROOM, MOUNTAIN_CAR, "--methods", "sun", "random", "--seeds", "0", "1"]
    tiny = [*TINY, "--data.total_frames", "1040", "--data.warmup_frames", "1000"]  # MountainCar's learner needs more
    compare.main([*study, "--jobs", "2", "--experiment", "local", "--", *tiny])
    compare.main([*study, "--launcher", "ray", "--experiment", "ray", "--", *tiny])
    for path in ("study.csv", "ThreeRoom/summary.csv", "MountainCar/summary.csv"):
        assert _summary(tmp_path / "results/ray" / path) == _summary(tmp_path / "results/local" / path), path
    auc = {}  # (env, method) → the seeds' coverage AUCs, from the per-run tables
    for env in ("ThreeRoom", "MountainCar"):
        for row in _summary(tmp_path / "results/ray" / env / "runs.csv"):
            auc.setdefault((env, row["method"]), []).append(float(row["coverage_auc"]))
    assert all(len(v) == 2 for v in auc.values()) and len(auc) == 4
    mean = {key: sum(v) / 2 for key, v in auc.items()}
    sun = (mean[("ThreeRoom", "sun")] + mean[("MountainCar", "sun")]) / 2
    rnd = (mean[("ThreeRoom", "random")] + mean[("MountainCar", "random")]) / 2
    row = _summary(tmp_path / "results/ray/study.csv")[0]
    assert row["method"] == "sun" and float(row["coverage_auc_vs_random_pct"]) == pytest.approx(
        100 * (sun - rnd) / rnd, rel=1e-4, abs=1e-4)


@pytest.mark.slow
def test_a_killed_ray_worker_resumes_its_run_from_the_checkpoint(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "ThreeRoom-sun-seed0"
    checkpoint = tmp_path / "checkpoints/kill" / name / "last.ckpt"
    log = tmp_path / "mlruns/logs/kill" / f"{name}.log"
    killed = []

    def kill_once_checkpointed():
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            if checkpoint.is_file() and log.is_file():
                pids = re.findall(r"worker pid (\d+)", log.read_text())
                if pids:
                    os.kill(int(pids[0]), signal.SIGKILL)
                    killed.append(int(pids[0]))
            time.sleep(0.2)

    killer = threading.Thread(target=kill_once_checkpointed, daemon=True)
    killer.start()
    compare.main(["--config", THREE_ROOM, "--methods", "sun", "--seeds", "0", "--launcher", "ray",
                  "--experiment", "kill", "--", "--data.total_frames", "2400", "--data.warmup_frames", "600",
                  "--data.num_envs", "2", "--metrics.log_every_frames", "400", "--checkpoint.every_frames", "400",
                  "--metrics.verbose", "false", "--trainer.enable_progress_bar", "false"])
    killer.join(1)
    assert killed, "the worker was never killed"
    text = log.read_text()
    assert f"resuming from checkpoints/kill/{name}/last.ckpt" in text, text[-3000:]
    client = mlflow.MlflowClient(local_store_uri())
    runs = client.search_runs([client.get_experiment_by_name("kill").experiment_id],
                              f"attributes.run_name = '{name}'")
    assert [run.info.status for run in runs] == ["FINISHED"]  # one MLflow run, continued by the retry
    assert finished_runs(client, "kill")[name].frames == 2400


def test_runs_recorded_by_an_earlier_report_are_reused_not_run(tmp_path, monkeypatch, capsys):
    """A study whose first runs' store is gone (another machine's): --reuse takes the runs its report recorded for
    finished, runs only the rest, and reports them all; --status counts them finished."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    client = mlflow.MlflowClient(local_store_uri())
    first = client.create_experiment("first")
    for (env, method, seed), (coverage, entropy) in FINALS.items():
        if env == "ThreeRoom":
            _log_run(client, first, f"{env}-{method}-seed{seed}", method, seed, coverage, entropy)
    compare.main(["--config", THREE_ROOM, "--methods", "sun", "random", "--seeds", "0", "1", "2", "--experiment", "first",
                  "--report-only", "--results-dir", "earlier"])
    # asked for seeds 0–2, it holds 0 and 1, and says so
    assert ", seeds 0, 1, 1000 env frames per run." in (tmp_path / "earlier/report.md").read_text()
    later = client.create_experiment("later")
    launched = []

    def fake_local(specs, experiment_name, uri, extra, log_dir, jobs, threads, on_finished, gpus=None):
        for spec in specs:  # seed 2 runs as seed 0 did
            launched.append(spec.name)
            _log_run(client, later, spec.name, spec.method, spec.seed, *FINALS[("ThreeRoom", spec.method, 0)])
            on_finished(spec.name)
        return []

    monkeypatch.setattr(local, "run_local", fake_local)
    args = ["--config", THREE_ROOM, "--methods", "sun", "random", "--seeds", "0", "1", "2", "--experiment", "later",
            "--reuse", "earlier"]
    compare.main(args + ["--status"])
    assert "6 runs: 4 finished, 0 running, 0 unfinished, 2 to run" in capsys.readouterr().out
    compare.main(args)
    assert launched == ["ThreeRoom-sun-seed2", "ThreeRoom-random-seed2"]
    report = (tmp_path / "results/later/report.md").read_text()
    # SUN's coverage AUC 0.75 · (0.8, 0.6, 0.8): 0.55 over three seeds, two of them as the earlier report recorded
    sun = next(line for line in report.splitlines() if line.startswith("| SUN adaptive | "))
    assert sun.startswith("| SUN adaptive | 3 | 1000 | ") and "| 0.550 [0.450, 0.600] (n = 3) |" in sun
    assert "Runs as recorded in earlier (`--reuse`): ThreeRoom-sun-seed0, ThreeRoom-sun-seed1" in report
    rows = list(csv.DictReader(open(tmp_path / "results/later/runs.csv")))
    assert [r["run_name"] for r in rows if r["method"] == "sun"] == [f"ThreeRoom-sun-seed{k}" for k in (0, 1, 2)]
    with pytest.raises(SystemExit) as exited:
        compare.main(args[:-1] + ["nowhere"])
    assert exited.value.code == 2 and "--reuse: no such folder: nowhere" in capsys.readouterr().err
