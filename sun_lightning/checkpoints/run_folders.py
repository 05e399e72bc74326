"""The checkpoint folders of the runs that share one name: a fresh run never writes into another run's.

A run's folder is ``<root>/<run name>`` (or ``checkpoint.dirpath``). A fresh launch (no ``--ckpt_path``)
whose folder already holds checkpoints is another run: it gets a folder of its own, numbered as
Lightning numbers versions, ``<folder>-v1``, ``<folder>-v2``, ... (:func:`fresh_folder`), and its MLflow
run name gets the same suffix. ``--ckpt_path last`` continues the newest of them, the one with the
highest number (:func:`newest_folder`). Imports nothing heavy: the CLI and the study runner use it
before anything is built.
"""

from __future__ import annotations

import re
from pathlib import Path

from sun_lightning.checkpoints.integrity import candidates

#: ``<folder>-v<N>``: Lightning's own version suffix (``ModelCheckpoint``'s ``-v1``, ``-v2``, ...).
VERSION_SEPARATOR = "-v"


def versions(base: str | Path) -> list[tuple[int, Path]]:
    """``(N, folder)`` of every existing folder of the runs named like ``base`` (``base`` itself is 0), by N."""
    base = Path(base)
    found = [(0, base)] if base.is_dir() else []
    if base.parent.is_dir():
        pattern = re.compile(re.escape(base.name + VERSION_SEPARATOR) + r"(\d+)")
        for path in base.parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
    return sorted(found)


def suffix(number: int) -> str:
    """``""`` for the first run of a name, ``-v<N>`` for the N-th after it."""
    return f"{VERSION_SEPARATOR}{number}" if number else ""


def newest_folder(base: str | Path) -> tuple[Path, int]:
    """The folder ``--ckpt_path last`` continues: the highest-numbered existing one (``base`` if none exists)."""
    found = versions(base)
    number, folder = found[-1] if found else (0, Path(base))
    return folder, number


def has_checkpoints(folder: str | Path) -> bool:
    """Whether ``folder`` holds a checkpoint (``last.ckpt`` or a ``frames=<N>.ckpt``)."""
    return bool(candidates(folder))


def fresh_folder(base: str | Path) -> tuple[Path, int]:
    """The folder of a fresh run: the newest one while it holds no checkpoint (a launch killed before its
    first one), else a new one numbered one past the newest."""
    folder, number = newest_folder(base)
    if not has_checkpoints(folder):
        return folder, number
    number += 1
    return Path(f"{base}{suffix(number)}"), number


def folder_of(checkpoint: str | Path, base: str | Path) -> tuple[Path, int] | None:
    """``(folder, N)`` where ``checkpoint`` lies in one of ``base``'s numbered folders, else ``None``."""
    parent = Path(checkpoint).resolve().parent
    return next(((path, number) for number, path in versions(base) if path.resolve() == parent), None)
