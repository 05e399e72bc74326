"""Data-parallel training with Lightning's DDP strategy: 2 CPU processes on gloo train one agent.

Each rank steps its own envs; every step is all-gathered, so all ranks hold the same D and pseudocounts,
equal to a single-process index fed the gathered transitions in rank order; DDP keeps the networks equal;
rank 0 alone writes one MLflow run. What each rank holds is dumped by ``tests/system/ddp/ddp_probe.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch

from sun_lightning import keys
from sun_lightning.exploration.build import build_pseudocount
from sun_lightning.exploration.distributed import gather_step, mean_over_ranks
from sun_lightning.envs.registry import goal_space
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.storage import STORED_KEYS, GoalReplayStorage
from tests.helpers import WALL_CLOCK

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "system" / "ddp"
DDP = ("--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu")


def _command(config: str, total: int, warmup: int, every: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf" / config),
            "--data.total_frames", str(total), "--data.warmup_frames", str(warmup),
            "--metrics.log_every_frames", str(every), "--checkpoint.every_frames", str(every),
            "--checkpoint.keep", "10", "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=ddp_probe.DumpState", *extra]


def _env(probe: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{PROBE}", "SUN_DDP_PROBE": str(probe),
            "OMP_NUM_THREADS": "1"}


def _fit(cwd: Path, probe: str, command: list[str], timeout: float = 600) -> list[dict]:
    """Run ``command`` in ``cwd``; the ranks' dumps (one per process)."""
    out = subprocess.run(command, cwd=cwd, env=_env(cwd / probe), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    dumps = sorted((cwd / probe).glob("rank*.pt"))
    return [torch.load(path, weights_only=False) for path in dumps]


def _assert_one_agent(ranks: list[dict], env_id: str, total: int) -> None:
    """The DDP checks: same networks, same D and counts everywhere, counts = a single-process index."""
    assert [state["rank"] for state in ranks] == [0, 1]
    zero, one = ranks
    assert zero["frames"] == one["frames"] >= total  # frames of the whole job
    assert zero["updates"] == one["updates"] > 0
    for name, value in zero["params"].items():
        assert torch.equal(value, one["params"][name]), name
    for name in STORED_KEYS:
        assert torch.equal(zero["storage"][name], one["storage"][name]), name
    assert torch.equal(zero["counts"], one["counts"])
    # D holds every rank's steps, rank-major within each step, in the order they were collected.
    steps = len(zero["local_steps"])
    assert steps == len(one["local_steps"]) and steps * 2 * len(zero["local_steps"][0][keys.OBS]) == zero["frames"]
    for name in STORED_KEYS:
        gathered = torch.cat([torch.cat([zero["local_steps"][t][name], one["local_steps"][t][name]]) for t in range(steps)])
        assert torch.equal(gathered, zero["storage"][name]), name
    # A single-process index fed the gathered transitions, one vector step at a time.
    space = goal_space(env_id)
    held = len(zero["counts"])
    streams = held // steps
    storage = GoalReplayStorage(space, streams, held)
    storage.load_state_dict({"steps": steps, "capacity": held, "columns": zero["storage"],
                             "tiles": space.tile(zero["storage"][keys.OBS]) if storage.tiles is not None else None})
    single = CountedReplay(storage, build_pseudocount(space, held, 1000, torch.device("cpu"), "torch"))
    single.recount()
    torch.testing.assert_close(single.counts(torch.arange(held)), zero["counts"])


def test_gather_step_packs_every_dtype_in_rank_order():
    """One float64 collective carries a step of mixed dtypes; the result is rank-major and exact."""
    step = {"obs": torch.randn(3, 5), "action": torch.tensor([0, 7, 2**40]), "done": torch.tensor([True, False, True]),
            "goal": torch.randn(3, 2, 2).double()}
    other = {name: value.flip(0) for name, value in step.items()}
    packed_other = torch.cat([value.reshape(3, -1).double() for value in other.values()], 1)
    out = gather_step(step, lambda packed: torch.stack([packed, packed_other]))
    for name, value in step.items():
        assert out[name].dtype == value.dtype and out[name].shape == (6, *value.shape[1:])
        assert torch.equal(out[name][:3], value) and torch.equal(out[name][3:], other[name])


def test_mean_over_ranks_keeps_names():
    halved = mean_over_ranks({"b": 4.0, "a": 2.0}, lambda values: values / 2)
    assert halved == {"a": 1.0, "b": 2.0}


def test_two_processes_explore_as_one_agent(tmp_path):
    """A 2-process gloo fit on ThreeRoom: one D, one pseudocount, one set of networks, one MLflow run."""
    total = 800
    ranks = _fit(tmp_path, "probe", _command("three_room.yaml", total, 400, 400, *DDP))
    _assert_one_agent(ranks, "sun_lightning/ThreeRoom-v0", total)
    # One update per frame after the warm-up, each averaging one batch per rank: (800 - 400) / 2 per rank.
    assert ranks[0]["updates"] == (total - 400) // 2
    # Exact counts: every entry's count is the number of entries of its (tile, action) in D.
    space = goal_space("sun_lightning/ThreeRoom-v0")
    zero = ranks[0]
    key = space.tile(zero["storage"][keys.OBS]) * space.num_actions + zero["storage"][keys.ACTION].reshape(-1)
    assert torch.equal(zero["counts"].long(), (key[:, None] == key[None, :]).sum(1))
    # Rank 0 alone writes MLflow: one run, finished, logged against the job's frames.
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "explore/visits/coverage")
    assert [point.step for point in history] == [400, 800]
    assert [item.path for item in client.list_artifacts(runs[0].info.run_id, "heatmaps")]  # rank 0's pictures
    assert (tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt").is_file()


@pytest.mark.slow
def test_two_processes_on_the_point_maze_repeat_exactly(tmp_path):
    """TD3 (two optimizers) and the radius pseudocount under DDP; the same seed gives the same numbers."""
    runs = []
    for launch in ("first", "second"):
        (tmp_path / launch).mkdir()
        runs.append(_fit(tmp_path / launch, "probe", _command("point_maze_s.yaml", 1600, 1000, 800, *DDP,
                                                             "--trainer.logger", "false")))
    _assert_one_agent(runs[0], "sun_lightning/PointMazeS-v0", 1600)
    for first, second in zip(*runs):
        strip = lambda final: {name: value for name, value in final.items() if not name.startswith(WALL_CLOCK)}  # noqa: E731
        assert strip(first["final"]) == strip(second["final"])
        for name, value in first["params"].items():
            assert torch.equal(value, second["params"][name]), name
        assert torch.equal(first["counts"], second["counts"])


@pytest.mark.slow
def test_killed_ddp_run_resumes_to_the_same_metrics(tmp_path):
    """``kill -9`` of both processes after a checkpoint, then ``--ckpt_path last``: the uninterrupted run's numbers."""
    args = ("three_room.yaml", 1600, 400, 400, *DDP, "--trainer.logger", "false")
    (tmp_path / "whole").mkdir()
    whole = _fit(tmp_path / "whole", "probe", _command(*args))
    cut = tmp_path / "cut"
    cut.mkdir()
    checkpoint = cut / "checkpoints" / "ThreeRoom-sun-seed0" / "frames=000000800.ckpt"
    proc = subprocess.Popen(_command(*args), cwd=cut, env=_env(cut / "killed"), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    while not checkpoint.exists():
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before writing {checkpoint}"
        assert time.monotonic() - start < 600
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = _fit(cut, "probe", _command(*args, "--ckpt_path", "last"))
    for a, b in zip(whole, resumed):
        if a["rank"] == 0:
            assert ({k: v for k, v in a["final"].items() if not k.startswith(WALL_CLOCK)}
                    == {k: v for k, v in b["final"].items() if not k.startswith(WALL_CLOCK)})
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name
        assert torch.equal(a["counts"], b["counts"])
