"""The local runner when a run is stopped from outside it (``kill`` of its ``fit``, SIGTERM from the system): the run
is named as stopped with the frames its checkpoint holds, the others get one Ctrl-C, and no run starts after it.
Each run here is a small stand-in process for ``fit`` that exits as ``fit`` does (sun_lightning/__main__.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sun_lightning.errors import stopped_exit_code, stopping_signal
from sun_lightning.study import local
from sun_lightning.study.local import StudyInterrupted, run_local
from sun_lightning.study.plan import RunSpec, checkpoint_dir

EXPERIMENT = "stop-test"

#: Writes a checkpoint at 1 200 frames, then exits as a ``fit`` SIGTERM stopped (143).
STOPPED = """
from pathlib import Path
folder = Path({folder!r}); folder.mkdir(parents=True, exist_ok=True)
(folder / "frames=000000600.ckpt").write_bytes(b"x"); (folder / "frames=000001200.ckpt").write_bytes(b"x")
raise SystemExit(143)
"""
#: Runs until it gets Ctrl-C (then exits as a stopped ``fit``, 130), or fails after a minute.
SIBLING = """
import signal, sys, time
from pathlib import Path
def stop(signum, frame):
    Path({marker!r}).write_text("ctrl-c"); sys.exit(130)
signal.signal(signal.SIGINT, stop)
Path({marker!r} + ".up").write_text("up")
time.sleep(60); sys.exit(1)
"""


def _spec(seed: int) -> RunSpec:
    return RunSpec("conf/three_room.yaml", "ThreeRoom", "sun", seed, ())


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    """``run_local`` in ``tmp_path`` with each run's process the script given for its seed; returns the scripts."""
    monkeypatch.chdir(tmp_path)
    scripts: dict[str, str] = {}

    def start_fit(args, ckpt_dir, cwd, log_path, threads, attempt_note="", environ=None, cpus=()):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "a")
        return subprocess.Popen([sys.executable, "-c", textwrap.dedent(scripts[Path(ckpt_dir).name])], cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT), log, False

    monkeypatch.setattr(local, "start_fit", start_fit)
    return scripts


def _run(specs, jobs, tmp_path, finished):
    return run_local(specs, EXPERIMENT, "sqlite:///unused.db", lambda spec: (), tmp_path / "logs", jobs, 1,
                     finished.append)


def test_exit_codes_of_a_stopped_run_name_their_signal():
    assert [stopped_exit_code(s) for s in (2, 15)] == [130, 143]
    assert [stopping_signal(code) for code in (130, 143, 0, 1, 2, 137, -15, None)] == \
        ["SIGINT", "SIGTERM", None, None, None, None, None, None]


def test_a_run_stopped_by_sigterm_stops_the_study_and_names_its_checkpoint(scripted, tmp_path, capsys):
    first, second = _spec(0), _spec(1)
    scripted[first.name] = STOPPED.format(folder=str(checkpoint_dir(EXPERIMENT, first.name)))
    scripted[second.name] = "raise SystemExit(0)"
    finished: list[str] = []
    with pytest.raises(StudyInterrupted) as stop:
        _run([first, second], 1, tmp_path, finished)
    assert stop.value.stopped == [first.name]
    out, err = capsys.readouterr()
    assert f"{first.name} stopped by SIGTERM after " in out
    assert (f"checkpoint at 1200 frames in {checkpoint_dir(EXPERIMENT, first.name)}: the same command resumes it"
            in out)
    assert f"{first.name} was stopped by SIGTERM: each running run saves a checkpoint and stops" in err
    assert second.name not in out and "finished" not in out  # not counted finished; nothing started after it
    assert finished == [first.name]  # nested under the study's parent run, as a stopped run is


def test_the_other_running_runs_get_one_ctrl_c(scripted, tmp_path, capsys):
    first, sibling, third = _spec(0), _spec(1), _spec(2)
    marker = tmp_path / "sibling"
    # The first run stops only once its sibling is up, so that the Ctrl-C has a process to reach.
    scripted[first.name] = (f"import time, pathlib\nwhile not pathlib.Path({str(marker) + '.up'!r}).exists(): "
                            f"time.sleep(0.05)\n" + STOPPED.format(folder=str(checkpoint_dir(EXPERIMENT, first.name))))
    scripted[sibling.name] = SIBLING.format(marker=str(marker))
    scripted[third.name] = "raise SystemExit(0)"
    with pytest.raises(StudyInterrupted) as stop:
        _run([first, sibling, third], 2, tmp_path, [])
    assert sorted(stop.value.stopped) == sorted([first.name, sibling.name])
    assert marker.read_text() == "ctrl-c"
    out = capsys.readouterr().out
    assert f"{sibling.name} stopped (exit 130)" in out and third.name not in out


def test_a_run_that_fails_does_not_stop_the_study(scripted, tmp_path, capsys):
    first, second = _spec(0), _spec(1)
    scripted[first.name], scripted[second.name] = "raise SystemExit(1)", "raise SystemExit(0)"
    finished: list[str] = []
    failed = _run([first, second], 1, tmp_path, finished)
    assert [f.split(" ", 1)[0] for f in failed] == [first.name] and finished == [second.name]
    assert f"{second.name} finished in " in capsys.readouterr().out
