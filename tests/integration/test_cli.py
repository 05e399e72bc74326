"""The command line end to end: configs, errors that name the problem, MLflow runs, reproducibility."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import torch
import pytest


ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--data.total_frames", "800",
    "--data.warmup_frames", "600",
    "--data.num_envs", "2",
    "--metrics.log_every_frames", "200",
    "--metrics.verbose", "false",
    "--trainer.enable_checkpointing", "false",
]


def runs(tmp_path: Path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    return mlflow.search_runs(experiment_names=["sun_lightning"], order_by=["start_time ASC"])


def test_fit_logs_a_readable_mlflow_run(fit, tmp_path):
    cli = fit("three_room.yaml", *TINY)
    final = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger").final
    assert 0 < final["explore/visits/coverage"] <= 1 and 0 < final["explore/visits/entropy"] <= 1
    assert cli.model.updates == 200  # one per frame after warm-up
    table = runs(tmp_path)
    assert len(table) == 1 and table.status[0] == "FINISHED"
    client = mlflow.tracking.MlflowClient()
    run_id = table.run_id[0]
    history = client.get_metric_history(run_id, "explore/visits/coverage")
    assert [m.step for m in history] == [200, 400, 600, 800]  # logged against env frames
    assert "train/loss/td" in table.columns.str.removeprefix("metrics.").tolist()
    assert table["params.data.env_id"][0] == "sun_lightning/ThreeRoom-v0"
    assert "config.yaml" in [a.path for a in client.list_artifacts(run_id)]
    config = Path(client.download_artifacts(run_id, "config.yaml", str(tmp_path))).read_text()
    assert "env_id: sun_lightning/ThreeRoom-v0" in config


def test_same_seed_same_numbers_and_random_baseline(fit, tmp_path):
    finals = []
    for _ in range(2):
        cli = fit("three_room.yaml", *TINY, "--seed_everything", "3", "--trainer.logger", "false")
        finals.append(next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger").final)
    keys = ["explore/visits/coverage", "explore/visits/entropy", "train/loss/td", "explore/goals/selected"]
    assert [finals[0][k] for k in keys] == [finals[1][k] for k in keys]
    cli = fit("three_room.yaml", *TINY, "--data.selector", "sun_lightning.goals.RandomActions", "--trainer.logger", "false")
    assert cli.model.updates == 0 and cli.datamodule.exploration.frames == 800


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data.env_id", "sun_lightning/ThreeRoomm-v0"],
         "error: data.env_id: unknown environment 'sun_lightning/ThreeRoomm-v0' (did you mean sun_lightning/ThreeRoom-v0?"),
        (["--data.total_frames", "0"], "error: data.total_frames must be positive, got 0"),
        (["--data.total_frames", "100"], "error: data.total_frames (100) must exceed data.warmup_frames (5000)"),
        (["--data.num_envs", "x"], "error: data.num_envs: expected int, got 'x'"),
        (["--data.total_framez", "1"], "error: unknown option --data.total_framez (did you mean --data.total_frames?)"),
        (["--model.init_args.lrr", "1"], "error: unknown key 'model.init_args.lrr' (did you mean model.init_args.lr?)"),
        (["--model.init_args.gamma", "1.5"], "gamma"),
    ],
)
def test_bad_input_is_one_line_naming_the_problem_with_exit_code_2(args, message, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf" / "three_room.yaml"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith("error: "), lines  # one line, no traceback
    assert message in lines[-1]


def test_a_config_file_with_an_unknown_key_and_a_bad_subcommand(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  env_id: sun_lightning/ThreeRoom-v0\n  total_framez: 100\n")
    for argv, message in ((["fit", "--config", str(bad)], "unknown key 'data.total_framez' (did you mean data.total_frames?)"),
                          (["fitt"], "unknown subcommand 'fitt' (did you mean fit?)"),
                          (["fit", "--config", "nope.yaml"], "config file not found: ")):
        proc = subprocess.run([sys.executable, "-m", "sun_lightning", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_help_names_the_program_and_lists_learners_and_environments(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sun_lightning", "fit", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m sun_lightning")
    for name in ("sun_lightning.learners.td3.TD3SVF", "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF",
                 "sun_lightning/AntMazeS-v0", "sun_lightning/ThreeRoom-v0", "sun_lightning/ArmPushH-v0"):
        assert name in proc.stdout, name


def test_print_config_shows_every_hyperparameter(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf" / "four_room_stuck.yaml"), "--print_config"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for line in ["gamma: 0.99", "lam: 0.95", "tau: 0.001", "lr: 0.001", "grad_clip: 1.0", "epsilon: 0.1",
                 "num_sequences: 16", "sequence_length: 16", "relabels: 4", "negatives: true", "dropout: 0.1",
                 "num_candidates: 256", "SUNAdaptive"]:
        assert line in proc.stdout, line
    assert not (tmp_path / "mlruns").exists() or not any((tmp_path / "mlruns").iterdir())


def _prepare(root: str, barrier) -> str:
    import os

    from sun_lightning.tracking.store import prepare_store

    os.chdir(root)
    barrier.wait()  # every process creates the fresh store at the same moment
    prepare_store("sqlite:///mlruns/mlflow.db", "together")
    return "ok"


def test_runs_started_together_on_a_fresh_store_do_not_race(tmp_path):
    """Without the lock, concurrent schema creation failed inside MLflow's migrations."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(3)
        with context.Pool(3) as pool:
            results = pool.starmap(_prepare, [(str(tmp_path), barrier)] * 3)
    assert results == ["ok"] * 3
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert [e.name for e in client.search_experiments() if e.name == "together"] == ["together"]


def test_a_checkpoint_resumes_the_learner_and_its_optimizer(fit, tmp_path):
    # The checkpoint holds the networks, AdamW's state, the update counter and the target update's
    # call count (and the exploration state, tests/integration/test_resume.py); --ckpt_path restores them.
    args = ["--trainer.logger", "false", "--trainer.enable_checkpointing", "true",
            "--trainer.default_root_dir", str(tmp_path / "ck")]
    first = fit("three_room.yaml", *TINY, *args)
    ckpt = next((tmp_path / "ck").rglob("*.ckpt"))
    saved = torch.load(ckpt, weights_only=False)
    assert saved["sun_updates"] == first.model.updates == 200 and saved["sun_target_update"] == {"calls": 200}
    state = saved["optimizer_states"][0]["state"]
    assert len(state) == 10 and all(float(s["step"]) == 200 for s in state.values())
    # a finished run continues to a larger total_frames from where it stopped (frames, replay, counters)
    second = fit("three_room.yaml", *TINY, *args[:2], "--trainer.enable_checkpointing", "false", "--data.total_frames", "1000",
                 "--ckpt_path", str(ckpt))
    assert second.datamodule.exploration.frames == 1000
    assert second.model.updates == 400  # 200 restored, 200 more (one per frame after the warm-up)
    opt = second.model.optimizers().optimizer
    assert type(opt) is torch.optim.AdamW and second.model.target_update.calls == 400
    assert all(float(s["step"]) == 400 for s in opt.state.values())


def test_two_in_process_runs_in_two_folders_log_to_their_own_stores(fit, tmp_path, monkeypatch):
    """MLflow keeps one engine per tracking URI in a process: the default relative store must not carry over."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        fit("three_room.yaml", *TINY)
    for folder in ("a", "b"):
        table = runs(tmp_path / folder)
        assert len(table) == 1 and table.status[0] == "FINISHED", folder


NOTICE_CHECK = """
import sys, warnings
from farama_notifications import notifications
text = "AdroitHandRelocateDense-v1 ... environment's reward functions were updated in v1.2.1"
notifications["gymnasium_robotics"] = {"1.4.2": text}
notifications["other_package"] = {"1.0": "AdroitHand elsewhere"}
import sun_lightning, sun_lightning.run.cli
leaf = lambda: any(f[1] is not None and "LeafSpec" in f[1].pattern for f in warnings.filters)
print("imported", len(notifications["gymnasium_robotics"]), leaf())
from sun_lightning.errors import UsageError
try:
    sun_lightning.run.cli.main(sys.argv[1:])
except UsageError:
    pass
print("cli", len(notifications["gymnasium_robotics"]), leaf(), len(notifications["other_package"]))
"""


@pytest.mark.parametrize("extra,kept", [((), 0), pytest.param(("--data.env_id", "AdroitHandRelocateDense-v1"), 1,
                                                                marks=pytest.mark.slow)])  # ≈ 30 s each under load
def test_the_cli_drops_unrelated_dependency_notices_and_importing_does_not(extra, kept, tmp_path):
    """Gymnasium-Robotics prints a notice about its Adroit envs on import: the CLI drops it (unless the run is about
    them) and filters Lightning's own deprecation warning; importing the package leaves both alone."""
    args = ["fit", "--config", str(ROOT / "conf" / "three_room.yaml"), *extra, "--data.nope", "1"]
    out = subprocess.run([sys.executable, "-c", NOTICE_CHECK, *args], cwd=tmp_path, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split("\n")[:2] == ["imported 1 False", f"cli {kept} True 1"], out.stdout + out.stderr[-2000:]
