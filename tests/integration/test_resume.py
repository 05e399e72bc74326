"""Exact resume: a run killed with SIGKILL after a checkpoint and resumed from ``last`` ends with the
metrics of the run that was never interrupted, bit for bit; checkpoints are named by env frames and written
atomically."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sun_lightning.run.cli import main
from tests.helpers import final_metrics
from sun_lightning.methods import method_args

ROOT = Path(__file__).resolve().parents[2]


def _args(config: str, total: int, warmup: int, every: int, *extra: str) -> list[str]:
    return ["fit", "--config", str(ROOT / "conf" / config), "--data.total_frames", str(total),
            "--data.warmup_frames", str(warmup), "--metrics.log_every_frames", str(every), "--metrics.verbose", "false",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--checkpoint.every_frames", str(every), "--checkpoint.keep", "10", *extra]


def _kill_after(args: list[str], checkpoint: Path, cwd: Path, timeout: float = 900) -> None:
    """Run ``python -m sun_lightning <args>`` and SIGKILL it as soon as ``checkpoint`` exists."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "sun_lightning", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    try:
        while not checkpoint.exists():
            if proc.poll() is not None:
                pytest.fail(f"the run ended (rc {proc.returncode}) before writing {checkpoint}")
            if time.monotonic() - start > timeout:
                pytest.fail(f"no {checkpoint} after {timeout} s")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("config,method", [("three_room.yaml", "sun"),
                                           pytest.param("cart_pole.yaml", "sun", marks=pytest.mark.slow),  # 34 s
                                           ("three_room.yaml", "random")])
def test_killed_run_resumes_to_the_same_metrics(config, method, tmp_path, monkeypatch):
    """Random, which never updates, checkpoints and resumes like a learning run (its steps are empty)."""
    monkeypatch.chdir(tmp_path)
    period = 400 if config == "cart_pole.yaml" else 200  # CartPole's learner needs a longer warm-up
    total = 4 * period
    args = _args(config, total, period, period, *method_args(method))  # total, warm-up, period
    whole = final_metrics(main(args))
    name = {"three_room.yaml": "ThreeRoom", "cart_pole.yaml": "CartPole"}[config] + f"-{method}-seed0"
    folder = tmp_path / "checkpoints" / name
    names = sorted(p.name for p in folder.glob("*.ckpt"))
    # Every period from the first update on (the first batch comes one vector step after the warm-up).
    frames = [int(n.removeprefix("frames=").removesuffix(".ckpt")) for n in names if n.startswith("frames=")]
    assert names[-1] == "last.ckpt" and len(frames) == 4 and frames[-1] == total, names
    assert all(b - a == period for a, b in zip(frames[1:-1], frames[2:])) or frames[1] - frames[0] <= period, frames
    for path in folder.iterdir():
        path.unlink()

    _kill_after(args, folder / f"frames={frames[1]:09d}.ckpt", tmp_path)
    saved = torch.load(folder / "last.ckpt", weights_only=False, map_location="cpu")
    assert saved["ExplorationDataModule"]["frames"] in frames[:2]  # killed right after writing the second
    from sun_lightning.exploration.datamodule import ExplorationDataModule

    restored = []
    load = ExplorationDataModule.load_state_dict
    monkeypatch.setattr(ExplorationDataModule, "load_state_dict",
                        lambda self, state: (restored.append(state["frames"]), load(self, state)))
    resumed = final_metrics(main([*args, "--ckpt_path", "last"]))
    assert restored == [saved["ExplorationDataModule"]["frames"]]  # it did resume, from the last checkpoint
    assert resumed == whole


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves the previous ``last.ckpt`` readable and intact: the new file is renamed into
    place only once written and recorded (``last.ckpt`` is then copied from it)."""
    monkeypatch.chdir(tmp_path)
    from sun_lightning.callbacks.checkpoint import FrameCheckpoint
    from sun_lightning.checkpoints.integrity import verify

    calls = []
    original = FrameCheckpoint._save_checkpoint

    def crash_on_second_write(self, trainer, filepath):
        calls.append(filepath)
        if len(calls) == 2:
            trainer.save_checkpoint(filepath + ".part", self.save_weights_only)
            raise KeyboardInterrupt  # as if killed between the write and the rename
        original(self, trainer, filepath)

    monkeypatch.setattr(FrameCheckpoint, "_save_checkpoint", crash_on_second_write)
    with pytest.raises(SystemExit):
        main(_args("three_room.yaml", total=1200, warmup=400, every=400))
    last = tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt"
    state = torch.load(last, weights_only=False, map_location="cpu")
    first = int(Path(calls[0]).stem.removeprefix("frames="))
    assert state["ExplorationDataModule"]["frames"] == first  # the first save, intact
    assert verify(last) == (None, state["sun_run"]) and verify(calls[0])[0] is None
    assert Path(calls[1] + ".part").exists() and not Path(calls[1]).exists()  # the interrupted write replaced nothing


FIXTURE = ROOT / "tests" / "data" / "three_room_sun_800.ckpt.gz"


def _unpack(fixture: Path, root: Path, run: str, frames: int) -> Path:
    """A kept checkpoint (gzipped) and its integrity record laid out as ``run``'s checkpoint at ``frames``."""
    import gzip
    import shutil

    folder = root / "checkpoints" / run
    folder.mkdir(parents=True)
    path = folder / f"frames={frames:09d}.ckpt"
    with gzip.open(fixture) as source, open(path, "wb") as target:
        shutil.copyfileobj(source, target)
    shutil.copy(fixture.with_suffix("").with_suffix(".ckpt.json"), path.with_name(path.name + ".json"))
    return path


def test_a_checkpoint_written_by_this_version_resumes(tmp_path, monkeypatch):
    """A checkpoint kept from this version (ThreeRoom, SUN, 800 frames: ``tests/data``) resumes and continues: a
    move of the modules whose classes it names must keep it loadable."""
    monkeypatch.chdir(tmp_path)
    path = _unpack(FIXTURE, tmp_path, "ThreeRoom-sun-seed0", 800)
    saved = torch.load(path, weights_only=False, map_location="cpu")
    args = _args("three_room.yaml", 1000, 600, 200, "--data.num_envs", "2", "--checkpoint.every_frames", "400")
    cli = main([*args, "--ckpt_path", str(path)])
    assert cli.datamodule.exploration.frames == 1000 and cli.model.updates == 400  # one update per frame after the warm-up
    kept = saved["ExplorationDataModule"]
    assert kept["frames"] == 800
    final = final_metrics(cli)
    assert 0 < final["explore/visits/coverage"] <= 1 and math.isfinite(final["train/loss/td"])


TD3_FIXTURE = ROOT / "tests" / "data" / "point_maze_s_sun_400_actor_tau.ckpt.gz"
SMALL_TD3 = ["--model.init_args.hidden", "32", "--model.init_args.features", "16", "--model.init_args.maxout_width", "64",
             "--model.init_args.head_width", "32", "--model.init_args.batch_size", "32", "--model.init_args.rbf_centres", "5"]


def test_a_td3_checkpoint_from_before_the_bootstrap_actor_follows_resumes(tmp_path, monkeypatch):
    """A PointMaze-S checkpoint (400 frames, small networks) written when the TD3 target actor still moved by an
    ``actor_tau`` of 5e-7 resumes under the command that wrote it: the setting that is gone is no difference, and
    from the first actor step on the bootstrap actor follows the online actor."""
    monkeypatch.chdir(tmp_path)
    path = _unpack(TD3_FIXTURE, tmp_path, "PointMazeS-sun-seed0", 400)
    saved = torch.load(path, weights_only=False, map_location="cpu")
    assert saved["hyper_parameters"]["actor_tau"] == 5e-7
    weights = saved["state_dict"]
    old_gap = max(float((weights[k] - weights[k.replace("actor_target.", "actor.")]).abs().max())
                  for k in weights if k.startswith("actor_target.") and "stats" not in k)
    args = _args("point_maze_s.yaml", 600, 200, 200, "--data.num_envs", "2", "--eval.every_frames", "0", *SMALL_TD3)
    cli = main([*args, "--ckpt_path", str(path)])
    assert cli.datamodule.exploration.frames == 600 and cli.model.updates == 100  # 0.25 updates per frame after the warm-up
    model = cli.model
    gap = max(float((t - p).abs().max()) for t, p in zip(model.actor_target.parameters(), model.actor.parameters()))
    assert gap < 0.1 * old_gap  # it was the near-initial slow copy; now one actor step behind
    final = final_metrics(cli)
    assert 0 < final["explore/visits/coverage"] <= 1 and math.isfinite(final["train/loss/td"])


def test_a_resumed_run_logs_the_heatmaps_of_the_uninterrupted_one(tmp_path, monkeypatch):
    """A run stopped past its 75 % snapshot (``max_steps``) and resumed to its budget: its MLflow run holds the
    snapshots the uninterrupted run logs — each quarter once, at its own frames, with the goals of the whole window
    (kept in the checkpoint) — and the snapshot where it stopped, which reports no longer read."""
    import mlflow

    from sun_lightning.results.runs import load_snapshots

    def fit(folder: Path, *extra: str) -> tuple[mlflow.MlflowClient, str]:
        folder.mkdir(exist_ok=True)
        monkeypatch.chdir(folder)
        store = f"sqlite:///{folder}/mlruns/mlflow.db"  # absolute: one database engine per URI in a process
        main(["fit", "--config", str(ROOT / "conf/three_room.yaml"), "--data.total_frames", "800",
              "--data.warmup_frames", "600", "--data.num_envs", "2", "--metrics.log_every_frames", "200",
              "--metrics.verbose", "false", "--trainer.enable_progress_bar", "false", "--seed_everything", "1",
              "--checkpoint.every_frames", "200", "--trainer.logger.init_args.tracking_uri", store, *extra])
        client = mlflow.MlflowClient(store)
        (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
        return client, run.info.run_id

    client, whole_id = fit(tmp_path / "whole")
    whole = load_snapshots(client, whole_id)
    fit(tmp_path / "stopped", "--trainer.max_steps", "100")
    client, run_id = fit(tmp_path / "stopped", "--ckpt_path", "last")

    names = sorted(a.path.rsplit("/", 1)[1] for a in client.list_artifacts(run_id, "heatmaps") if a.path.endswith("npz"))
    (stop,) = [n for n in names if n.endswith("_stop.npz")]
    assert names == sorted(["heatmaps_025.npz", "heatmaps_050.npz", "heatmaps_075.npz", "heatmaps_100.npz", stop])
    resumed = load_snapshots(client, run_id)
    assert sorted(resumed) == sorted(whole) == [25, 50, 75, 100]
    assert [resumed[p].frames for p in resumed] == [whole[p].frames for p in resumed] == [200, 400, 600, 800]
    assert whole[100].selected.sum() > 0  # goals are drawn after the warm-up: the last window has them
    for percent in whole:
        for name in ("visits", "selected", "reached"):
            np.testing.assert_array_equal(getattr(resumed[percent], name), getattr(whole[percent], name))
