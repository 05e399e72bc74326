"""Checkpoints a user can trust: verified when written and read, the fallback of ``--ckpt_path last``,
mismatched checkpoints refused, every hyperparameter checked against its annotated domain, YAML errors with their
place, and checkpoints loaded with an allow-list. Each row of the issue's table is one line and exit code 2 (or the
fallback with its one-line note), and leaves the checkpoints and the MLflow store as they were."""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import typing
from pathlib import Path

import pytest
import torch

from sun_lightning.checkpoints import integrity, safe_pickle
from sun_lightning.domains import domain_of, domains
from sun_lightning.errors import ConfigError
from tests.helpers import final_metrics
from sun_lightning.checkpoints.identity import FORMAT, FORMAT_KEY, RUN_KEY, check_fits, migrate, recorded_identity

ROOT = Path(__file__).resolve().parents[2]
THREE_ROOM = {"format": FORMAT, "version": "0.1.0", "env_id": "sun_lightning/ThreeRoom-v0",
              "learner": "sun_lightning.learners.dqn.DQNSVF", "method": "sun", "seed": 0, "frames": 800,
              "num_envs": 4, "layout": None, "model": {"lr": 0.001, "width": 64}}


def _write(path: Path, payload: dict, run: dict | None = THREE_ROOM) -> Path:
    """A checkpoint file as FrameCheckpoint writes it: ``.part``, recorded, renamed (``run=None``: format 1, no record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = Path(f"{path}.part")
    torch.save({**payload, "pad": torch.zeros(10_000)}, part)  # 40 kB: larger than a cut
    if run is None:
        os.replace(part, path)
    else:
        integrity.install(part, path, run)
    return path


def _cut(path: Path, size: int = 5000) -> None:
    """Keep the first ``size`` bytes (a disk crash or a copy cut short)."""
    data = path.read_bytes()[:size]
    path.write_bytes(data)


def _fingerprint(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for folder in folders if folder.exists()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _runs(tmp_path: Path) -> int:
    db = tmp_path / "mlruns" / "mlflow.db"
    if not db.exists():
        return 0
    import mlflow

    return len(mlflow.MlflowClient(f"sqlite:///{db}").search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()]))


# ---- integrity ----------------------------------------------------------------------------------------------
def test_a_write_killed_at_any_step_leaves_a_file_its_record_accepts(tmp_path, monkeypatch):
    final = _write(tmp_path / "last.ckpt", {"x": torch.arange(1000)})
    old = final.read_bytes()
    real_replace = os.replace
    # install's renames: sidecar (accepting old and new), the checkpoint, sidecar (new only); a kill before each
    for kill_at in range(4):
        calls = []

        def replace(src, dst):
            calls.append(dst)
            if len(calls) > kill_at:
                raise KeyboardInterrupt  # the process dies here
            real_replace(src, dst)

        part = tmp_path / "last.ckpt.part"
        torch.save({"x": torch.arange(1000) * (kill_at + 2)}, part)
        new = part.read_bytes()
        monkeypatch.setattr(os, "replace", replace)
        if kill_at < 3:
            with pytest.raises(KeyboardInterrupt):
                integrity.install(part, final, THREE_ROOM)
        else:
            integrity.install(part, final, THREE_ROOM)
        monkeypatch.setattr(os, "replace", real_replace)
        assert integrity.verify(final) == (None, THREE_ROOM), kill_at
        assert final.read_bytes() == (old if kill_at < 2 else new), kill_at
        old = final.read_bytes()


def test_verify_names_a_cut_a_changed_and_a_format_1_file(tmp_path):
    cut = _write(tmp_path / "a.ckpt", {"x": torch.zeros(10_000)})
    size = cut.stat().st_size
    _cut(cut)
    assert integrity.verify(cut) == (f"5000 bytes, {size} were written (cut short or overwritten)", None)
    flipped = _write(tmp_path / "b.ckpt", {"x": torch.zeros(10_000)})
    data = bytearray(flipped.read_bytes())
    data[size // 2] ^= 1
    flipped.write_bytes(bytes(data))
    assert integrity.verify(flipped)[0] == "its SHA-256 differs from the one recorded when it was written (damaged)"
    legacy = _write(tmp_path / "c.ckpt", {"x": torch.zeros(10_000)}, run=None)
    assert integrity.verify(legacy) == (None, None)  # no record: the zip records' CRC-32s are checked
    _cut(legacy)
    assert integrity.verify(legacy)[0].startswith("not a complete checkpoint")


def test_last_falls_back_to_the_newest_intact_checkpoint_with_one_note(tmp_path):
    folder = tmp_path / "run"
    for frames in (400, 800):
        _write(folder / f"frames={frames:09d}.ckpt", {"frames": frames}, {**THREE_ROOM, "frames": frames})
    _write(folder / "last.ckpt", {"frames": 800}, {**THREE_ROOM, "frames": 800})
    assert integrity.resolve_checkpoint("last", folder) == (str(folder / "last.ckpt"), {**THREE_ROOM, "frames": 800}, None)
    _cut(folder / "last.ckpt", 100)
    path, run, note = integrity.resolve_checkpoint("last", folder)
    assert path == str(folder / "frames=000000800.ckpt") and run["frames"] == 800
    assert note.startswith(f"note: {folder / 'last.ckpt'} is damaged (100 bytes, ") and note.endswith(
        f"resuming from the newest intact checkpoint of the run, {path}") and "\n" not in note
    _cut(folder / "frames=000000800.ckpt", 100)
    path, run, note = integrity.resolve_checkpoint("last", folder)
    assert path == str(folder / "frames=000000400.ckpt") and run["frames"] == 400 and "frames=000000800.ckpt is damaged" in note
    _cut(folder / "frames=000000400.ckpt", 100)
    with pytest.raises(ConfigError, match=r"^no intact checkpoint to resume in .*: .*last.ckpt is damaged .*frames=000000400"):
        integrity.resolve_checkpoint("last", folder)
    assert integrity.resolve_checkpoint("last", tmp_path / "none") == ("last", None, None)  # a first launch


# ---- the table, from the command line ------------------------------------------------------------
def test_row_1_a_cut_checkpoint_is_one_line_exit_2_and_left_as_it_was(tmp_path, cli, run_cli):
    folder = tmp_path / "checkpoints" / "ThreeRoom-sun-seed0"
    named = _write(folder / "frames=000000400.ckpt", {"frames": 400})
    intact = _write(folder / "frames=000000800.ckpt", {"frames": 800})
    _cut(named)
    before = _fingerprint(tmp_path / "checkpoints")
    code, lines = run_cli("fit", "--config", str(ROOT / "conf/three_room.yaml"), "--ckpt_path", str(named))
    assert code == 2 and len(lines) == 1 and _fingerprint(tmp_path / "checkpoints") == before, lines
    assert lines[0].startswith(f"error: checkpoint {named} is damaged: 5000 bytes, ") and \
        f"the newest intact one beside it is {intact}" in lines[0], lines
    for path in folder.iterdir():  # every file of the run damaged: no silent restart from zero
        if path.suffix == ".ckpt":
            _cut(path, 100)
    _write(folder / "last.ckpt", {"frames": 800})
    _cut(folder / "last.ckpt", 100)
    before = _fingerprint(tmp_path / "checkpoints")
    code, lines = cli("fit", "--config", str(ROOT / "conf/three_room.yaml"), "--ckpt_path", "last")
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: no intact checkpoint to resume in "), lines
    assert _fingerprint(tmp_path / "checkpoints") == before and _runs(tmp_path) == 0


def test_row_2_a_checkpoint_of_another_run_is_refused_naming_both_runs_and_the_keys(tmp_path, cli):
    checkpoint = _write(tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt", {"frames": 800})
    before = _fingerprint(tmp_path / "checkpoints")
    code, lines = cli("fit", "--config", str(ROOT / "conf/four_room_stuck.yaml"), "--ckpt_path", str(checkpoint))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: checkpoint {checkpoint} was written by another run (ThreeRoom, DQNSVF, sun, "
                               "seed 0, 800 frames, sun_lightning 0.1.0) than this command asks for (FourRoomStuck, "
                               "DQNSVF, sun, seed 0): data.env_id (sun_lightning/ThreeRoom-v0 → "
                               "sun_lightning/FourRoomStuck-v0) differs"), lines
    code, lines = cli("fit", "--config", str(ROOT / "conf/three_room.yaml"), "--ckpt_path", "last",
                      "--model.init_args.width", "32", "--data.num_envs", "2")
    assert code == 2 and len(lines) == 1 and "data.num_envs (4 → 2), model.init_args.width (64 → 32) differ" in lines[0]
    assert _fingerprint(tmp_path / "checkpoints") == before and _runs(tmp_path) == 0


def test_row_3_a_learning_rate_outside_its_domain_is_one_line(tmp_path, cli):
    for args, line in (
        (["--model.init_args.lr", "-1"], "error: model.init_args.lr must be positive, got -1.0"),
        (["--model.init_args.tau", "1.5"], "error: model.init_args.tau must be in (0, 1], got 1.5"),
        (["--data.updates_per_frame", "-0.5"], "error: data.updates_per_frame must be >= 0, got -0.5"),
        (["--checkpoint.keep", "0"], "error: checkpoint.keep must be positive, got 0"),
    ):
        code, lines = cli("fit", "--config", str(ROOT / "conf/three_room.yaml"), *args)
        assert code == 2 and len(lines) == 1 and lines[0].startswith(line), (args, lines)
    assert not (tmp_path / "checkpoints").exists() and _runs(tmp_path) == 0


def test_row_4_a_yaml_error_names_the_file_line_column_and_reason(tmp_path, cli):
    bad = tmp_path / "conf" / "x.yaml"
    bad.parent.mkdir()
    bad.write_text("model:\n  class_path: [sun_lightning.learners.dqn.DQNSVF\n")
    code, lines = cli("fit", "--config", "conf/x.yaml")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: conf/x.yaml:3:1: expected ',' or ']', but got '<stream end>'"), lines


# ---- checkpoints are code ------------------------------------------------------------------------------------
class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_checkpoint_naming_other_code_is_refused_before_it_runs(tmp_path, cli):
    blob = pickle.dumps(_Payload())
    with pytest.raises(ConfigError, match=r"names posix.system, which is not on the allow-list"):
        safe_pickle.loads(blob)
    assert safe_pickle.loads(pickle.dumps({"a": torch.ones(2), "n": [1, 2.0]}))["n"] == [1, 2.0]
    # the whole file: torch.load(weights_only=True) refuses it, in one line, before Lightning loads anything
    checkpoint = tmp_path / "checkpoints" / "evil.ckpt"
    checkpoint.parent.mkdir()
    torch.save({"hyper_parameters": {}, "x": _Payload()}, checkpoint)
    code, lines = cli("fit", "--config", str(ROOT / "conf/three_room.yaml"), "--ckpt_path", str(checkpoint))
    assert code == 2 and len(lines) == 1 and "holds an object that loading with weights_only=True refuses" in lines[0], lines
    assert not (tmp_path / "pwned").exists()


# ---- versions ------------------------------------------------------------------------------------------------
def test_a_format_1_checkpoint_migrates_and_a_newer_one_names_its_version():
    old = {"hyper_parameters": {"_class_path": "sun_lightning.learners.dqn.DQNSVF", "lr": 1e-3, "width": 64,
                                "_instantiator": "x"}, "ExplorationDataModule": {"frames": 1600}}
    run = recorded_identity(old)
    assert run == {"format": 1, "version": "0.1.0 or earlier", "frames": 1600,
                   "learner": "sun_lightning.learners.dqn.DQNSVF", "model": {"lr": 0.001, "width": 64}}
    assert FORMAT_KEY not in old and migrate(old)[FORMAT_KEY] == FORMAT and old[RUN_KEY] == run
    asked = {**THREE_ROOM, "model": {"lr": 0.001, "width": 32}}
    with pytest.raises(ConfigError, match=r"environment not recorded, DQNSVF.*model.init_args.width \(64 → 32\) differs"):
        check_fits("old.ckpt", run, asked)
    check_fits("old.ckpt", run, {**asked, "model": {"lr": 1e-3, "width": 64}})  # what it records agrees: loads
    with pytest.raises(ConfigError, match=r"written by sun_lightning 9.0 \(checkpoint format 7\).*reads formats 1 to 2"):
        check_fits("new.ckpt", {**THREE_ROOM, "format": 7, "version": "9.0"}, THREE_ROOM)


# ---- domains -------------------------------------------------------------------------------------------------
def _configurable():
    from sun_lightning.callbacks.checkpoint import FrameCheckpoint
    from sun_lightning.callbacks.exploration import ExplorationLogger
    from sun_lightning.run.cli import LEARNERS
    from sun_lightning.exploration.config import DataConfig
    from sun_lightning.goals.ensemble import DISCOVER

    learners = []
    for path in LEARNERS:
        module, _, name = path.rpartition(".")
        learners.append(getattr(__import__(module, fromlist=[name]), name))
    return [*learners, DataConfig, DISCOVER, FrameCheckpoint, ExplorationLogger]


def _bare(hint) -> set:
    """The plain types of an annotation (``Annotated`` and ``X | None`` unwrapped)."""
    if typing.get_origin(hint) is typing.Annotated:
        return _bare(typing.get_args(hint)[0])
    args = typing.get_args(hint)
    return set().union(*(_bare(arg) for arg in args)) if args else {hint}


@pytest.mark.parametrize("cls", _configurable(), ids=lambda cls: cls.__name__)
def test_every_numeric_hyperparameter_declares_its_domain(cls):
    """The domains come from the signatures: a new int or float argument without one fails here."""
    found = domains(cls)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not klass.__module__.startswith(("sun_lightning", "callbacks")):
            continue
        hints = typing.get_type_hints(init, include_extras=True)
        for name in inspect.signature(init).parameters:
            hint = hints.get(name)
            if _bare(hint) & {int, float} and name != "seed":  # a seed is any integer
                assert name in found and domain_of(hint) is not None, f"{klass.__name__}.{name} has no domain"


@pytest.mark.parametrize(("cls", "key", "value", "message"), [
    ("sun_lightning.learners.dqn.DQNSVF", "lr", -1.0, "lr must be positive, got -1.0"),
    ("sun_lightning.learners.dqn.DQNSVF", "gamma", 1.0, "gamma must be in (0, 1), got 1.0"),
    ("sun_lightning.learners.dqn.DQNSVF", "lam", -0.1, "lam must be in [0, 1], got -0.1"),
    ("sun_lightning.learners.dqn.DQNSVF", "dropout", 1.0, "dropout must be in [0, 1), got 1.0"),
    ("sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF", "ensemble_size", 0, "ensemble_size must be positive, got 0"),
    ("sun_lightning.learners.td3.TD3SVF", "exploration_noise", -0.4, "exploration_noise must be >= 0, got -0.4"),
    ("sun_lightning.learners.td3.TD3SVF", "future_fraction", 1.5, "future_fraction must be in [0, 1], got 1.5"),
    ("sun_lightning.learners.ensemble_td3.EnsembleTD3SVF", "critic_tau", 0.0, "critic_tau must be in (0, 1], got 0.0"),
    ("sun_lightning.learners.td3.TD3SVF", "batch_size", 0, "batch_size must be positive, got 0"),
    ("sun_lightning.learners.td3.TD3SVF", "lr", float("nan"), "lr must be positive, got nan"),
])
def test_a_learner_refuses_a_value_outside_its_domain_at_construction(cls, key, value, message):
    from sun_lightning.envs.registry import goal_space

    module, _, name = cls.rpartition(".")
    learner = getattr(__import__(module, fromlist=[name]), name)
    env = "sun_lightning/ThreeRoom-v0" if "dqn" in module else "sun_lightning/PointMazeS-v0"
    with pytest.raises(ConfigError) as error:
        learner(goal_space(env), **{key: value})
    assert str(error.value) == message


# ---- end to end (slow: real fits) ----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_damaged_last_and_a_format_1_checkpoint_resume_to_the_uninterrupted_metrics(tmp_path, monkeypatch, capsys):
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(ROOT / "conf/three_room.yaml"), "--data.total_frames", "1600",
            "--data.warmup_frames", "400", "--metrics.log_every_frames", "400", "--metrics.verbose", "false",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--checkpoint.every_frames", "400",
            "--checkpoint.keep", "10"]
    whole = final_metrics(main(args))
    folder = Path("checkpoints") / "ThreeRoom-sun-seed0"
    frames = sorted(folder.glob("frames=*.ckpt"))
    assert len(frames) >= 3 and all(integrity.verify(path)[0] is None for path in [*frames, folder / "last.ckpt"])
    legacy = tmp_path / "old" / "run.ckpt"
    legacy.parent.mkdir()
    state = torch.load(frames[-3], weights_only=False, map_location="cpu")
    del state[FORMAT_KEY], state[RUN_KEY]  # as written before identities were recorded, and without a record beside it
    torch.save(state, legacy)

    _cut(folder / "last.ckpt")
    _cut(frames[-1])
    capsys.readouterr()
    resumed = final_metrics(main([*args, "--ckpt_path", "last"]))
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith(f"note: {folder / 'last.ckpt'} is damaged (5000 bytes, ") and \
        f"{frames[-1]} is damaged (5000 bytes, " in notes[0] and notes[0].endswith(
            f"resuming from the newest intact checkpoint of the run, {frames[-2]}"), notes
    assert resumed == whole
    assert all(integrity.verify(path)[0] is None for path in folder.glob("*.ckpt"))  # rewritten on the way

    assert final_metrics(main([*args, "--ckpt_path", str(legacy)])) == whole  # format 1 migrates and resumes exactly
