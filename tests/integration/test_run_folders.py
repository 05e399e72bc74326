"""A fresh run never writes into another run's checkpoint folder: it gets ``<run>-v<N>`` and an MLflow run
name saying so; ``--ckpt_path last`` continues the newest run of the name."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from sun_lightning.checkpoints import run_folders
from sun_lightning.checkpoints.integrity import digest

ROOT = Path(__file__).resolve().parents[2]
NAME = "ThreeRoom-sun-seed0"


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def test_fresh_folder_numbers_past_the_newest_run_with_checkpoints(tmp_path):
    base = tmp_path / NAME
    assert run_folders.fresh_folder(base) == (base, 0)  # nothing there yet
    (base).mkdir()
    (base / "mlflow_run.json").write_text("{}")  # a launch killed before its first checkpoint: not another run's
    assert run_folders.fresh_folder(base) == (base, 0)
    _touch(base / "last.ckpt")
    assert run_folders.fresh_folder(base) == (tmp_path / f"{NAME}-v1", 1)
    _touch(tmp_path / f"{NAME}-v2" / "frames=000000800.ckpt")  # a frames file alone is a checkpoint too
    (tmp_path / f"{NAME}-v10").mkdir()  # numbered, not sorted as text; empty: the next fresh run's
    (tmp_path / f"{NAME}-vx").mkdir()  # not one of the name's folders
    (tmp_path / f"{NAME}-v3.bak").mkdir()
    assert [n for n, _ in run_folders.versions(base)] == [0, 2, 10]
    assert run_folders.newest_folder(base) == (tmp_path / f"{NAME}-v10", 10)
    assert run_folders.fresh_folder(base) == (tmp_path / f"{NAME}-v10", 10)
    _touch(tmp_path / f"{NAME}-v10" / "last.ckpt")
    assert run_folders.fresh_folder(base) == (tmp_path / f"{NAME}-v11", 11)
    assert run_folders.folder_of(tmp_path / f"{NAME}-v2" / "last.ckpt", base) == (tmp_path / f"{NAME}-v2", 2)
    assert run_folders.folder_of(tmp_path / "elsewhere" / "last.ckpt", base) is None
    assert run_folders.suffix(0) == "" and run_folders.suffix(3) == "-v3"


#: ThreeRoom with checkpoints every 200 frames; the frame budget is each call's.
SMALL = ("--data.warmup_frames", "400", "--data.num_envs", "2", "--metrics.log_every_frames", "200",
         "--checkpoint.every_frames", "200")


def _files(folder: Path) -> dict[str, str]:
    return {path.name: digest(path)["sha256"] for path in sorted(folder.iterdir())}


@pytest.mark.slow  # four fits: ≈ 80 s on the loaded 2-core machine
def test_a_second_fresh_run_keeps_the_first_runs_checkpoints(fit, tmp_path, capsys):
    first = fit("three_room.yaml", *SMALL, "--data.total_frames", "420")
    base = tmp_path / "checkpoints" / NAME
    before = _files(base)
    assert "last.ckpt" in before and "frames=000000420.ckpt" in before

    second = fit("three_room.yaml", *SMALL, "--data.total_frames", "440")  # the same config, rerun with a change: another run
    out = capsys.readouterr().out
    assert _files(base) == before  # the first run's files, byte for byte
    again = tmp_path / "checkpoints" / f"{NAME}-v1"
    assert Path(second.trainer.checkpoint_callback.dirpath) == again and (again / "last.ckpt").is_file()
    assert f"checkpoint: {again / 'last.ckpt'}" in out and f"this run writes its own to checkpoints/{NAME}-v1" in out

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    table = mlflow.search_runs(experiment_names=["sun_lightning"], order_by=["start_time ASC"])
    assert table["tags.mlflow.runName"].tolist() == [NAME, f"{NAME}-v1"]
    first_id, second_id = table.run_id.tolist()
    assert first.trainer.logger.run_id == first_id and second.trainer.logger.run_id == second_id

    # ``last`` continues the newest run of the name, in its folder and its MLflow run
    resumed = fit("three_room.yaml", *SMALL, "--data.total_frames", "460", "--ckpt_path", "last")
    assert Path(resumed.trainer.checkpoint_callback.dirpath) == again
    assert (first.model.updates, second.model.updates) == (20, 40)  # one update per frame after the warm-up
    assert resumed.model.updates == 60  # the second run's 40, then 20 more
    assert resumed.trainer.logger.run_id == second_id
    assert _files(base) == before

    # the first run is intact and still continues, in its own folder
    old = fit("three_room.yaml", *SMALL, "--data.total_frames", "440", "--ckpt_path", str(base / "last.ckpt"))
    assert Path(old.trainer.checkpoint_callback.dirpath) == base
    assert old.model.updates == 40 and old.trainer.logger.run_id == first_id
    names = mlflow.search_runs(experiment_names=["sun_lightning"])["tags.mlflow.runName"]
    assert sorted(names) == [NAME, f"{NAME}-v1"]  # no third run


def test_a_folder_held_by_a_live_launch_is_skipped_by_fresh_runs_and_refused_to_resume(tmp_path):
    """Two launches of one name at once: the second fresh one takes ``-v1`` even before the first has written a
    checkpoint, and ``--ckpt_path last`` beside it is refused; once the holder dies, its folder is free."""
    import os
    import subprocess
    import sys
    import time

    from jsonargparse import Namespace

    from sun_lightning.errors import ConfigError
    from sun_lightning.run.resume import choose_folder, claim_folder

    base = tmp_path / NAME
    code = ("import sys, time; from sun_lightning.checkpoints import run_folders; "
            f"run_folders.claim({str(base)!r}); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout.readline().strip() == "held"
        who = run_folders.holder(base)
        assert who is not None and who.startswith(f"process {child.pid} on ")
        assert run_folders.fresh_folder(base) == (tmp_path / f"{NAME}-v1", 1)  # no checkpoint there, but held
        assert run_folders.fresh_folder(base, claims=False) == (base, 0)  # DDP's other ranks share the folder
        with pytest.raises(ConfigError, match=rf"checkpoint folder {base} is in use by another run \(process {child.pid} "):
            run_folders.claim(base)
        fresh = Namespace(ckpt_path=None, checkpoint=Namespace(dirpath=None), trainer=Namespace())
        assert choose_folder(fresh, base) == 1 and fresh.checkpoint.dirpath == f"{base}-v1"
        assert not (tmp_path / f"{NAME}-v1").exists()  # claimed only once every check has passed
        claim_folder(fresh)
        assert (tmp_path / f"{NAME}-v1" / run_folders.IN_USE).is_file()
        assert run_folders.holder(f"{base}-v1") is None  # this process's own claim is not "another run"
        resume = Namespace(ckpt_path="last", checkpoint=Namespace(dirpath=None), trainer=Namespace())
        (base / "last.ckpt").write_bytes(b"x")
        assert run_folders.newest_folder(base) == (tmp_path / f"{NAME}-v1", 1)
        (tmp_path / f"{NAME}-v1").rename(tmp_path / "elsewhere")  # leave the held folder the newest
        with pytest.raises(ConfigError, match="is in use by another run"):
            choose_folder(resume, base)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while run_folders.holder(base) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run_folders.holder(base) is None  # the kernel dropped the dead launch's lock
    assert choose_folder(resume, base) == 0 and resume.checkpoint.dirpath == str(base)
