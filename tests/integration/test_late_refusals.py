"""A refused command changes nothing: the checks that need the heavy imports (an unknown environment, a goal space
or a map that cannot work, a learner that cannot act in the env, a package that does not import) refuse before the
run's checkpoint folder and its MLflow run are claimed (the pre-check tells some of these kinds earlier now: they
stay here, a refusal at either point must leave nothing); ``--ckpt_path last`` with nothing to resume is one line,
never a fresh run; and with several runs of the name it says which one it continues."""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from sun_lightning.checkpoints import integrity
from sun_lightning.checkpoints.identity import FORMAT
from sun_lightning.tracking.store import prepare_store

ROOT = Path(__file__).resolve().parents[2]
THREE_ROOM = ROOT / "conf" / "three_room.yaml"
MCC = ROOT / "conf" / "custom" / "mountain_car_continuous.yaml"
NAME = "ThreeRoom-sun-seed0"
#: The identity three_room.yaml asks for (as tests/integration/test_checkpoint_trust.py writes it).
RUN = {"format": FORMAT, "version": "0.1.0", "env_id": "sun_lightning/ThreeRoom-v0",
       "learner": "sun_lightning.learners.dqn.DQNSVF", "method": "sun", "seed": 0, "frames": 800,
       "num_envs": 4, "layout": None, "model": {"lr": 0.001, "width": 64}}


def _checkpoint(folder: Path) -> Path:
    """A finished run's ``last.ckpt`` as FrameCheckpoint records it."""
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / "last.ckpt.part"
    torch.save({"frames": 800, "pad": torch.zeros(1000)}, part)
    integrity.install(part, folder / "last.ckpt", RUN)
    return folder / "last.ckpt"


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` (folders too) with its bytes' digest."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*")) if "mlruns" in p.parts or "checkpoints" in p.parts}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """An MLflow store with the experiment runs log to (made once: MLflow's schema takes seconds)."""
    folder = tmp_path_factory.mktemp("store") / "mlruns"
    prepare_store(f"sqlite:///{folder}/mlflow.db", "sun_lightning")
    return folder


@pytest.fixture
def finished(store, tmp_path, monkeypatch) -> Path:
    """A finished run of three_room.yaml (its checkpoint, relative to ``tmp_path``) and the store it logged to."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(store, tmp_path / "mlruns")
    return _checkpoint(Path("checkpoints") / NAME)


@pytest.mark.parametrize(("args", "line"), [
    ([THREE_ROOM, "--data.env_id", "sun_lightning/ThreeRoomm-v0"], "error: data.env_id: unknown environment "
                                                                  "'sun_lightning/ThreeRoomm-v0'"),
    ([THREE_ROOM, "--data.env_id", "sun_lightning/Tiny-v0", "--data.layout", "S . X"],
     "error: data.layout: unknown symbol 'X' at row 0, column 2"),
    ([MCC, "--data.goal.reach", "-0.5"], "error: data.goal.reach must be radius or a distance > 0"),
    ([MCC, "--data.goal.dims", "[0, 5]"], "error: data.goal.dims: [5] outside the observation"),  # the env's to tell
    ([MCC, "--data.env_id", "MountainCarContinous-v0"], "error: data.env_id: gymnasium does not know"),
    ([MCC, "--model", "sun_lightning.learners.dqn.DQNSVF"], "error: model.class_path: DQNSVF cannot act in"),
    ([MCC, "--data.env_package", "no_such_package"], "error: data.env_package: cannot import 'no_such_package'"),
])
def test_a_late_refusal_leaves_checkpoints_and_mlruns_as_they_were(args, line, finished, tmp_path, cli):
    before = _tree(tmp_path)
    code, lines = cli("fit", "--config", *args)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(line), lines
    assert _tree(tmp_path) == before


def test_a_late_refusal_on_a_fresh_directory_creates_nothing(tmp_path, cli):
    code, lines = cli("fit", "--config", MCC, "--data.goal.reach", "-0.5")
    assert code == 2 and len(lines) == 1, lines
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "mlruns").exists()


def test_last_with_nothing_to_resume_is_one_line_and_creates_nothing(tmp_path, cli):
    # (a short budget: the code before this fix trained a fresh run here)
    code, lines = cli("fit", "--config", THREE_ROOM, "--ckpt_path", "last", "--data.total_frames", "420",
                      "--data.warmup_frames", "400", "--data.num_envs", "2", "--trainer.logger", "false")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: nothing to resume: checkpoints/{NAME} holds no checkpoint of this run "
                               "(drop --ckpt_path last to start it"), lines
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "mlruns").exists()


def test_last_after_a_refused_command_still_finds_the_finished_run(finished, tmp_path, cli):
    """The issue's sequence: a finished run, one refused command, then ``--ckpt_path last``. The refused command
    left no empty ``-v1`` folder, so ``last`` names the finished run's checkpoint (checked against the command:
    here refused for a changed width, proof that it was found and read)."""
    assert cli("fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/ThreeRoomm-v0")[0] == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [NAME]
    code, lines = cli("fit", "--config", THREE_ROOM, "--ckpt_path", "last", "--model.init_args.width", "32")
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: checkpoint {finished} was written by "
                                                                 "another run"), lines


def test_last_with_several_runs_of_the_name_says_which_it_resumes(finished, tmp_path, monkeypatch, cli):
    """Up to the fit itself (the checkpoints here are stand-ins): the line said before it, and what it loads."""
    from lightning.pytorch import Trainer

    from sun_lightning.run.cli import SUNCLI

    loaded = []

    @functools.wraps(Trainer.fit)  # its signature: the parser's ``fit`` options come from it
    def fit(self, *args, ckpt_path=None, **kwargs):
        loaded.append(ckpt_path)

    monkeypatch.setattr(Trainer, "fit", fit)
    monkeypatch.setattr(SUNCLI, "after_fit", lambda self: None)
    newest = _checkpoint(Path("checkpoints") / f"{NAME}-v1")
    code, lines = cli("fit", "--config", THREE_ROOM, "--ckpt_path", "last", "--trainer.logger", "false")
    assert code == 0 and loaded == [str(newest)]
    assert lines == [f"note: --ckpt_path last resumes {newest}, the newest of the 2 runs named {NAME} "
                     f"(earlier: checkpoints/{NAME}; continue one with --ckpt_path <its last.ckpt>)"], lines
