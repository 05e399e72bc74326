"""Integration tests train whole runs through the command line: in-process with the ``fit`` fixture, or as a
process with ``run_cli``; each in its own ``tmp_path`` (checkpoints, ``mlruns/``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: No metric lines and no progress bar: the tests read the numbers, not the console.
QUIET = ("--metrics.verbose", "false", "--trainer.enable_progress_bar", "false")


def config_path(config: str | Path) -> str:
    """A config of ``conf/`` by file name, or any path."""
    path = Path(config)
    return str(path if path.is_absolute() else ROOT / "conf" / path)


@pytest.fixture
def fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., object]:
    """``fit(config, *overrides)``: ``python -m sun_lightning fit --config <config> <overrides>`` in-process, in
    ``tmp_path``, quiet; returns the LightningCLI after its fit (its trainer, model and datamodule)."""
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)

    def run(config: str | Path, *overrides: str):
        return main(["fit", "--config", config_path(config), *QUIET, *overrides])

    return run


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> Callable[..., tuple[int, list[str]]]:
    """``cli(*args)``: ``python -m sun_lightning <args>`` run in this process (no interpreter start-up) in
    ``tmp_path``; its exit code and non-empty output lines."""
    from sun_lightning.__main__ import entry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["sun_lightning"])  # pytest's own arguments are not the command's

    def run(*args: str | Path) -> tuple[int, list[str]]:
        code = entry([str(arg) for arg in args])
        out = capsys.readouterr()
        return code, [line for line in (out.err + out.out).splitlines() if line.strip()]

    return run


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., tuple[int, list[str]]]:
    """``run_cli(*args, timeout=180)``: ``python -m sun_lightning <args>`` as a process in ``tmp_path`` (this
    checkout's package); its exit code and non-empty output lines."""

    def run(*args: str, timeout: float = 180) -> tuple[int, list[str]]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "sun_lightning", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return proc.returncode, [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]

    return run
