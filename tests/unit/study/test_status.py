"""``compare --status``: each run of a study finished, running, unfinished (with the frames it logged) or to run, and
the minutes the rest needs, by hand on a small store."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from sun_lightning.study.plan import RunSpec, checkpoint_dir
from sun_lightning.study.status import FINISHED, RUNNING, TO_RUN, UNFINISHED, run_budget, status_table, study_status

EXPERIMENT = "study-test"
COV, MINUTES = "explore/visits/coverage", "perf/run/minutes"


def _config(root: Path, name: str, env_id: str, total: int | None) -> str:
    path = root / f"{name}.yaml"
    path.write_text(f"data:\n  env_id: {env_id}\n" + (f"  total_frames: {total}\n" if total else ""))
    return str(path)


def _run(client, exp: str, name: str, method: str, seed: int, steps: list[int], minutes: float | None = None,
         status: str = "FINISHED") -> None:
    run = client.create_run(exp, run_name=name, tags={"method": method, "seed": str(seed)})
    for step in steps:
        client.log_metric(run.info.run_id, COV, 0.5, step=step)
    if minutes is not None:
        client.log_metric(run.info.run_id, MINUTES, minutes)
    client.set_terminated(run.info.run_id, status)


def test_each_run_is_placed_and_the_rest_estimated_by_hand(tmp_path):
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment(EXPERIMENT, artifact_location=str(tmp_path / "artifacts"))
    room = _config(tmp_path, "room", "sun_lightning/ThreeRoom-v0", 1000)
    maze = _config(tmp_path, "maze", "sun_lightning/GridMaze-v0", 2000)
    specs = [RunSpec(config, env, method, seed, ()) for seed in (0, 1) for config, env in
             ((room, "sun_lightning/ThreeRoom-v0"), (maze, "sun_lightning/GridMaze-v0")) for method in ("sun", "adagoal")]
    _run(client, exp, "ThreeRoom-sun-seed0", "sun", 0, [500, 1000], 10.0)
    _run(client, exp, "ThreeRoom-sun-seed1", "sun", 1, [500, 1000], 14.0)
    _run(client, exp, "ThreeRoom-adagoal-seed0", "adagoal", 0, [500, 1000], 36.0)
    _run(client, exp, "GridMaze-sun-seed0", "sun", 0, [1000, 2000], 20.0)
    # AdaGoal on GridMaze: stopped with a checkpoint after logging 500 of its 2000 frames
    _run(client, exp, "GridMaze-adagoal-seed0", "adagoal", 0, [250, 500], status="KILLED")
    folder = tmp_path / checkpoint_dir(EXPERIMENT, "GridMaze-adagoal-seed0")
    folder.mkdir(parents=True)
    (folder / "last.ckpt").write_bytes(b"checkpoint")
    # a launch killed before its first checkpoint left a folder and a run but nothing to resume from: to run
    (tmp_path / checkpoint_dir(EXPERIMENT, "ThreeRoom-adagoal-seed1")).mkdir(parents=True)
    _run(client, exp, "ThreeRoom-adagoal-seed1", "adagoal", 1, [500], status="KILLED")

    states = {s.spec.name: s for s in study_status(client, EXPERIMENT, specs, tmp_path)}
    assert [states[n].state for n in ("ThreeRoom-sun-seed0", "GridMaze-adagoal-seed0", "ThreeRoom-adagoal-seed1",
                                      "GridMaze-sun-seed1")] == [FINISHED, UNFINISHED, TO_RUN, TO_RUN]
    assert states["ThreeRoom-sun-seed1"].minutes == 14.0 and states["ThreeRoom-sun-seed1"].frames == 1000
    # AdaGoal on ThreeRoom: its own finished run there, 36 min, from scratch
    assert states["ThreeRoom-adagoal-seed1"].minutes == pytest.approx(36.0)
    assert states["ThreeRoom-adagoal-seed1"].basis == "median of 1 finished"
    # SUN on GridMaze: its one finished run there
    assert states["GridMaze-sun-seed1"].minutes == pytest.approx(20.0)
    # AdaGoal on GridMaze has no finished run: SUN's 20 min there × AdaGoal / SUN on ThreeRoom (36 / median(10, 14)
    # = 3), and the unfinished one has 3/4 of its 2000 frames to go
    unfinished = states["GridMaze-adagoal-seed0"]
    assert (unfinished.frames, unfinished.budget) == (500, 2000)
    assert unfinished.minutes == pytest.approx(20.0 * 3 * 0.75)
    assert unfinished.basis == "sun here × 3.00, its ratio on 1 env(s)"
    assert states["GridMaze-adagoal-seed1"].minutes == pytest.approx(60.0)
    # a study of AdaGoal alone estimates from every finished run of the experiment, SUN's too
    (alone,) = study_status(client, EXPERIMENT, [states["GridMaze-adagoal-seed1"].spec], tmp_path)
    assert alone.minutes == pytest.approx(60.0)

    table = status_table(list(states.values()), jobs=2)
    left = 36 + 20 + 45 + 60  # ThreeRoom AdaGoal seed 1, GridMaze SUN seed 1, GridMaze AdaGoal seeds 0 and 1
    assert table.splitlines()[-1] == (f"8 runs: 4 finished, 0 running, 1 unfinished, 3 to run; left ≈ {left} min of runs, "
                                      f"≈ {left / 2 / 60:.1f} h at 2 at once")
    assert "GridMaze-adagoal-seed0" in table and "≈ 45 left (sun here × 3.00" in table


def test_a_run_a_live_process_holds_is_running(tmp_path):
    """A launch at work (its folder claimed by a live process, no checkpoint yet) is running with the frames its
    MLflow run logged; once the process is gone, the same folder with a checkpoint is unfinished."""
    import os
    import subprocess
    import sys

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment(EXPERIMENT, artifact_location=str(tmp_path / "artifacts"))
    room = _config(tmp_path, "room", "sun_lightning/ThreeRoom-v0", 1000)
    spec = RunSpec(room, "sun_lightning/ThreeRoom-v0", "sun", 1, ())
    _run(client, exp, "ThreeRoom-sun-seed0", "sun", 0, [500, 1000], 10.0)
    _run(client, exp, spec.name, "sun", 1, [250], status="RUNNING")
    folder = tmp_path / checkpoint_dir(EXPERIMENT, spec.name)
    code = ("import time; from sun_lightning.checkpoints import run_folders; "
            f"run_folders.claim({str(folder)!r}); print('held', flush=True); time.sleep(60)")
    root = Path(__file__).resolve().parents[3]
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert child.stdout.readline().strip() == "held"
        (state,) = study_status(client, EXPERIMENT, [spec], tmp_path)
        assert (state.state, state.frames, state.minutes) == (RUNNING, 250, pytest.approx(7.5))
        assert status_table([state]).splitlines()[-1].startswith("1 runs: 0 finished, 1 running, 0 unfinished, 0 to")
    finally:
        child.kill()
        child.wait()
    (folder / "last.ckpt").write_bytes(b"checkpoint")
    (state,) = study_status(client, EXPERIMENT, [spec], tmp_path)
    assert (state.state, state.frames) == (UNFINISHED, 250)


def test_a_run_without_any_finished_run_to_go_by_has_no_estimate(tmp_path):
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    room = _config(tmp_path, "room", "sun_lightning/ThreeRoom-v0", 1000)
    (state,) = study_status(client, "no-such-experiment", [RunSpec(room, "sun_lightning/ThreeRoom-v0", "sun", 0, ())],
                            tmp_path)
    assert state.state == TO_RUN and state.minutes is None
    assert status_table([state]).endswith("1 run(s) without an estimate")


def test_a_runs_budget_is_the_last_total_frames_given(tmp_path):
    room = _config(tmp_path, "room", "sun_lightning/ThreeRoom-v0", 50000)
    assert run_budget(room) == 50000
    assert run_budget(room, extra=("--data.total_frames", "7000", "--data.total_frames", "8000")) == 8000
    # --budget-scale 0.1: 5000 frames (whole vector steps of the default single env)
    assert run_budget(room, scale=0.1) == 5000
    assert run_budget(room, scale=0.1, extra=("--data.total_frames", "900")) == 900


def test_compare_status_lists_the_study_and_runs_nothing(tmp_path, monkeypatch, capsys):
    from sun_lightning.compare import main

    config = str(Path("conf/three_room.yaml").resolve())
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    main(["--config", config, "--methods", "sun", "random", "--seeds", "0", "1", "--experiment", EXPERIMENT,
          "--tracking-uri", uri, "--status"])
    out = capsys.readouterr().out
    assert "ThreeRoom-random-seed1" in out and "0 / 50000" in out
    assert out.rstrip().endswith("4 runs: 0 finished, 0 running, 0 unfinished, 4 to run; left ≈ 0 min of runs, ≈ 0.0 h at 1 at "
                                 "once, and 4 run(s) without an estimate")
    client = mlflow.MlflowClient(uri)
    assert client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id]) == []  # no parent run
    assert not (tmp_path / "results").exists() and not (tmp_path / "checkpoints").exists()
