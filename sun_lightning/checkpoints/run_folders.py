"""The checkpoint folders of the runs that share one name: a fresh run never writes into another run's.

A run's folder is ``<root>/<run name>`` (or ``checkpoint.dirpath``). A fresh launch (no ``--ckpt_path``)
whose folder already holds checkpoints is another run: it gets a folder of its own, numbered as
Lightning numbers versions, ``<folder>-v1``, ``<folder>-v2``, ... (:func:`fresh_folder`), and its MLflow
run name gets the same suffix. ``--ckpt_path last`` continues the newest of them, the one with the
highest number (:func:`newest_folder`). Imports nothing heavy: the CLI and the study runner use it
before anything is built.

A launch claims its folder for as long as its process lives (:func:`claim`: an exclusive ``flock`` on
``.in_use`` in the folder, which the kernel drops when the process ends, however it ends). A fresh launch
skips folders another live process holds, even before their first checkpoint, and ``--ckpt_path last`` on a
folder another process holds is refused: two launches of one name at once (a study started twice, a run
started by hand beside its study) never write into one folder or one MLflow run.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from pathlib import Path

from sun_lightning.checkpoints.integrity import candidates
from sun_lightning.errors import ConfigError

#: The file a live launch holds locked in its folder.
IN_USE = ".in_use"
_claimed: dict[Path, object] = {}  # the folders this process holds, and their open lock files

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


def fresh_folder(base: str | Path, claims: bool = True) -> tuple[Path, int]:
    """The folder of a fresh run: the newest one while it holds no checkpoint (a launch killed before its
    first one) and no other live launch holds it (unless ``claims`` is False), else the first free one
    numbered past it."""
    folder, number = newest_folder(base)
    while has_checkpoints(folder) or (claims and holder(folder) is not None):
        number += 1
        folder = Path(f"{base}{suffix(number)}")
    return folder, number


def holder(folder: str | Path) -> str | None:
    """Who holds ``folder`` — ``"process <pid> on <host> since <time>"`` — if another live process does, else
    ``None`` (this process's own claim, a folder nobody holds, a folder that does not exist)."""
    folder = Path(folder)
    path = folder / IN_USE
    if folder.resolve() in _claimed or not path.is_file():
        return None
    with open(path) as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return probe.read().strip() or "another process"
        fcntl.flock(probe, fcntl.LOCK_UN)
    return None


def in_use_error(folder: str | Path, who: str) -> ConfigError:
    """The one-line refusal of a launch whose folder another live launch holds."""
    return ConfigError(f"checkpoint folder {folder} is in use by another run ({who}): wait for it to end, or stop "
                       "it (Ctrl-C saves a checkpoint) and launch this again")


def claim(folder: str | Path) -> None:
    """Hold ``folder`` for the rest of this process (see the module docstring); a second claim is a no-op.

    Raises:
        ConfigError: another live process holds it.
    """
    folder = Path(folder)
    key = folder.resolve()
    if key in _claimed:
        return
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / IN_USE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        who = handle.read().strip() or "another process"
        handle.close()
        raise in_use_error(folder, who) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    _claimed[key] = handle


def folder_of(checkpoint: str | Path, base: str | Path) -> tuple[Path, int] | None:
    """``(folder, N)`` where ``checkpoint`` lies in one of ``base``'s numbered folders, else ``None``."""
    parent = Path(checkpoint).resolve().parent
    return next(((path, number) for number, path in versions(base) if path.resolve() == parent), None)
