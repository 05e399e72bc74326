"""Faults end a run cleanly: a NaN loss stops it with a message and a checkpoint of the last good
state; Ctrl-C or SIGTERM stops it with a checkpoint, the MLflow run marked KILLED and exit status 130 or 143."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--data.warmup_frames", "400", "--data.num_envs", "4", "--metrics.log_every_frames", "200"]


def _status(tmp_path: Path) -> str:
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("sun_lightning")
    (run,) = client.search_runs([experiment.experiment_id])
    return run.info.status


def test_a_nan_loss_stops_the_run_naming_it_and_keeps_the_last_good_state(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf/three_room.yaml"), *TINY,
         "--data.total_frames", "2000", "--model.init_args.lr", "1e6"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: train/loss/td became ") and "at update " in line and "env frame " in line, line
    checkpoint = tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt"
    assert str(checkpoint) in line
    state = torch.load(checkpoint, weights_only=False, map_location="cpu")
    assert all(torch.isfinite(value).all() for value in state["state_dict"].values() if value.is_floating_point())
    assert _status(tmp_path) == "FAILED"


@pytest.mark.parametrize("signum, code, said, name", [(signal.SIGINT, 130, "interrupted", "Ctrl-C"),
                                                      (signal.SIGTERM, 143, "interrupted by SIGTERM", "SIGTERM")],
                         ids=["ctrl_c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_with_a_checkpoint_a_killed_mlflow_run_and_a_stop_status(signum, code, said, name,
                                                                                        tmp_path):
    """SIGTERM (``kill``, a scheduler) is Ctrl-C's twin, not Lightning's own SystemExit of status 0 without a
    checkpoint: a checkpoint past the warm-up, the MLflow run KILLED, and exit 128 + the signal."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf/three_room.yaml"), *TINY,
         "--data.total_frames", "1000000"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    for line in proc.stdout:  # the first log line comes after the warm-up, during learning
        if line.startswith("[frames 600]") or time.monotonic() - start > 240:
            break
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert f"{said}: saving a checkpoint and stopping ({name} again to stop at once)" in err
    assert f"stopped ({name}): " in out
    checkpoint = tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt"
    frames = torch.load(checkpoint, weights_only=False, map_location="cpu")["ExplorationDataModule"]["frames"]
    assert 600 <= frames < 1000000
    assert _status(tmp_path) == "KILLED"
