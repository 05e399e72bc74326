"""Packing runs onto GPUs: the shares Ray accepts, which device each run gets, and the runner's launch of them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sun_lightning.study import local
from sun_lightning.study.gpus import GpuSlots, accelerator_args, check_share, runs_per_gpu, visible_gpus
from sun_lightning.study.plan import RunSpec


def test_shares_are_fractions_or_whole_gpus():
    assert [runs_per_gpu(f) for f in (1, 0.5, 0.25, 1 / 3, 0.3, 2)] == [1, 2, 4, 3, 3, 1]
    for bad, message in ((0, "positive"), (-0.5, "positive"), (float("nan"), "positive"), (1.5, "whole number")):
        with pytest.raises(ValueError, match=message):
            check_share(bad)
    assert accelerator_args(0.25) == ("--trainer.accelerator", "gpu", "--trainer.devices", "1")
    assert accelerator_args(2) == ("--trainer.accelerator", "gpu", "--trainer.devices", "2")


def test_quarter_shares_fill_two_gpus_least_loaded_first_and_reuse_freed_slots():
    slots = GpuSlots(["0", "1"], 0.25)
    assert slots.capacity == 8
    got = [slots.acquire() for _ in range(8)]
    assert got == [("0",), ("1",)] * 4  # alternating: the least loaded device, the lower id on ties
    assert slots.acquire() is None
    slots.release(("1",))
    assert slots.acquire() == ("1",) and slots.acquire() is None


def test_whole_gpu_shares_take_free_devices_only():
    slots = GpuSlots(["2", "5", "7"], 2)
    assert slots.capacity == 1
    assert slots.acquire() == ("2", "5") and slots.acquire() is None
    slots.release(("2", "5"))
    assert slots.acquire() == ("2", "5")
    with pytest.raises(ValueError, match="needs 2 GPU"):
        GpuSlots(["0"], 2)
    with pytest.raises(ValueError, match="this machine has none"):
        GpuSlots([], 0.5)


def test_visible_devices_follow_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3, 1"}) == ["3", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []


def test_the_local_runner_holds_runs_until_a_gpu_slot_frees(tmp_path, monkeypatch):
    """Three runs at half a GPU each on one GPU: two start at once on it, the third when one ends; each
    child sees its device in CUDA_VISIBLE_DEVICES."""
    monkeypatch.chdir(tmp_path)
    seen, started, pinned = [], [], []

    def fake_start(args, ckpt_dir, cwd, log_path, threads, attempt_note="", environ=None, cpus=()):
        import subprocess

        started.append(environ)
        pinned.append(cpus)
        seen.append(sum(1 for _ in started) - len(finished))
        log = open(log_path, "a")
        code = "import os, time; time.sleep(0.6); print(os.environ['CUDA_VISIBLE_DEVICES'])"
        process = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **environ}, stdout=log)
        return process, log, False

    finished: list[str] = []
    monkeypatch.setattr(local, "start_fit", fake_start)
    specs = [RunSpec("c.yaml", "E", "sun", seed, ()) for seed in range(3)]
    failed = local.run_local(specs, "x", "sqlite:///x.db", lambda spec: (), tmp_path, jobs=8, threads=1,
                             on_finished=finished.append, gpus=GpuSlots(["4"], 0.5))
    assert failed == [] and len(finished) == 3
    assert started == [{"CUDA_VISIBLE_DEVICES": "4"}] * 3
    assert len(pinned) == 3  # (their cores: test_concurrent_runs_get_disjoint_equal_shares_of_the_cores)
    assert max(seen) == 2  # never more than the GPU's two slots at once
    assert [Path(tmp_path / f"{s.name}.log").read_text().strip() for s in specs] == ["4"] * 3


def test_the_runner_refuses_a_gpu_share_without_gpus_before_touching_the_store(tmp_path, monkeypatch, capsys):
    from sun_lightning import compare

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    config = Path(compare.__file__).resolve().parents[1] / "conf" / "three_room.yaml"
    with pytest.raises(SystemExit) as stop:
        compare.main(["--config", str(config), "--methods", "random", "--seeds", "0", "--gpus-per-run", "0.25"])
    assert stop.value.code == 2
    assert "--gpus-per-run 0.25 needs 1 GPU(s); this machine has none" in capsys.readouterr().err
    assert not (tmp_path / "mlruns").exists()
    with pytest.raises(SystemExit):
        compare.main(["--config", str(config), "--gpus-per-run", "1.5"])
    assert "--gpus-per-run above 1 must be a whole number of GPUs, got 1.5" in capsys.readouterr().err


def test_concurrent_runs_get_disjoint_equal_shares_of_the_cores(tmp_path):
    from sun_lightning.study.cores import CoreSlots, describe

    slots = CoreSlots(list(range(16)), 4)
    got = [slots.acquire() for _ in range(4)]
    assert got == [tuple(range(4 * i, 4 * i + 4)) for i in range(4)]
    slots.release(got[1])
    assert slots.acquire() == (4, 5, 6, 7)
    assert CoreSlots([0, 1], 3).acquire() == ()  # more runs than cores: not pinned
    assert CoreSlots([0, 1, 2], 2).sets == [(0,), (1,)]  # equal shares; the odd core stays free
    assert (describe((4, 5, 6, 7)), describe((0, 2)), describe((3,))) == ("CPUs 4-7", "CPUs 0,2", "CPU 3")


def test_a_pinned_run_sees_only_its_cores(tmp_path):
    """The run's affinity mask is set before it starts: MuJoCo's threads (available_cpus) follow it."""
    import os

    from sun_lightning.study.plan import start_fit

    cpu = sorted(os.sched_getaffinity(0))[-1]
    process, log, _ = start_fit(["-c", "import os; print(sorted(os.sched_getaffinity(0)))"], tmp_path / "ckpt",
                                tmp_path, tmp_path / "run.log", 1, cpus=(cpu,))
    assert process.wait() == 0
    log.close()
    text = (tmp_path / "run.log").read_text()
    assert f"on CPU {cpu}" in text.splitlines()[0] and text.splitlines()[-1] == f"[{cpu}]"
