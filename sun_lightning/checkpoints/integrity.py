"""Checkpoints verified when written and when read.

Each checkpoint ``<name>.ckpt`` has a sidecar ``<name>.ckpt.json`` that records the size and SHA-256 of
the bytes that were written (read back from disk after the write) and the run that wrote them
(:mod:`sun_lightning.checkpoints.identity`). A file is intact when its size and checksum equal a recorded pair.

A write is crash-safe at every instant: the new file is written to ``.part``; the sidecar then
accepts both the old and the new bytes; the ``.part`` is renamed over the old file (atomic on POSIX);
the sidecar then accepts the new bytes only. A kill between any two steps leaves a file its sidecar
accepts. ``--ckpt_path last`` resumes from the newest intact checkpoint of the run
(:func:`resolve_checkpoint`), saying so in one line when ``last.ckpt`` is not it, and never
restarts from zero because a file is damaged.

Checkpoints written before sidecars existed (format 1) are checked by their zip container's CRC-32s
(``torch.save`` writes a zip archive whose records each carry one).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

from sun_lightning.errors import ConfigError

LAST = "last.ckpt"
FRAMES_GLOB = "frames=*.ckpt"
SIDECAR_SUFFIX = ".json"
_CHUNK = 1 << 20


def sidecar_of(path: str | Path) -> Path:
    """``frames=000001600.ckpt`` → ``frames=000001600.ckpt.json``."""
    return Path(str(path) + SIDECAR_SUFFIX)


def digest(path: str | Path) -> dict[str, Any]:
    """The file's ``size`` in bytes and ``sha256`` hex digest, read from disk."""
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": sha.hexdigest()}


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` through a ``.part`` file and a rename (readers see old or new)."""
    part = f"{path}.part"
    with open(part, "w") as file:
        json.dump(data, file, indent=1, default=str)
        file.flush()
        os.fsync(file.fileno())
    os.replace(part, path)


def read_sidecar(path: str | Path) -> dict | None:
    """The sidecar of checkpoint ``path``, or ``None`` where there is none (or it is unreadable)."""
    try:
        with open(sidecar_of(path)) as file:
            data = json.load(file)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def install(part: str | Path, final: str | Path, run: dict, recorded: dict | None = None) -> None:
    """Rename the finished ``part`` to ``final`` with its size and checksum recorded beside it.

    Args:
        part: the freshly written file (``<final>.part``).
        final: the checkpoint's name.
        run: the writing run's identity (stored in the sidecar, read before anything is built on resume).
        recorded: ``part``'s digest where already known (a hard link to a checkpoint just recorded),
            else it is read back from disk (which also verifies the write).
    """
    new = {**(recorded or digest(part)), "run": run}
    old = read_sidecar(final)
    previous = old["files"][:1] if old and Path(final).exists() else []
    write_json_atomic(sidecar_of(final), {"files": [new, *previous]})  # accepts the old bytes and the new
    os.replace(part, final)
    write_json_atomic(sidecar_of(final), {"files": [new]})


def remove(path: str | Path) -> None:
    """Delete a checkpoint and its sidecar."""
    for name in (Path(path), sidecar_of(path)):
        try:
            name.unlink()
        except FileNotFoundError:
            pass


def verify(path: str | Path) -> tuple[str | None, dict | None]:
    """Check checkpoint ``path`` against its record.

    Returns:
        ``(problem, run)``: ``problem`` is ``None`` for an intact file, else what is wrong in a few
        words; ``run`` is the writing run's identity where recorded (``None`` for format-1 files).
    """
    path = Path(path)
    if not path.is_file():
        return "no such file", None
    side = read_sidecar(path)
    if side is None:
        return _verify_zip(path), None
    size = path.stat().st_size
    entries = [entry for entry in side["files"] if entry.get("size") == size]
    if not entries:
        expected = side["files"][0].get("size")
        return f"{size} bytes, {expected} were written (cut short or overwritten)", None
    sha = digest(path)["sha256"]
    for entry in entries:
        if entry.get("sha256") == sha:
            return None, entry.get("run")
    return "its SHA-256 differs from the one recorded when it was written (damaged)", None


def _verify_zip(path: Path) -> str | None:
    """A format-1 checkpoint (no sidecar): ``None`` if its zip records and their CRC-32s are intact."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return f"not a complete checkpoint ({error})"
    return None if bad is None else f"record {bad} fails its CRC check (damaged)"


def _frames_of(path: Path) -> int:
    return int(path.stem.removeprefix("frames="))


def candidates(folder: str | Path) -> list[Path]:
    """A run folder's checkpoints, newest first: ``last.ckpt``, then ``frames=<N>.ckpt`` by N descending."""
    folder = Path(folder)
    frames = sorted(folder.glob(FRAMES_GLOB), key=_frames_of, reverse=True)
    return [path for path in [folder / LAST, *frames] if path.is_file()]


def resolve_checkpoint(ckpt_path: str, folder: str | Path | None) -> tuple[str, dict | None, str | None]:
    """The checkpoint ``fit --ckpt_path`` loads, verified.

    Args:
        ckpt_path: a path, or ``last`` (the run's own folder ``folder``).
        folder: the run's checkpoint folder (``checkpoint.dirpath``).

    Returns:
        ``(path, run, note)``: the intact checkpoint to load (``"last"`` unchanged where the run has
        none yet: Lightning then starts the run, as for a first launch), its writing run's identity
        where recorded, and a one-line note where ``last`` fell back to an older checkpoint.

    Raises:
        ConfigError: the named checkpoint is damaged, or ``last`` finds no intact one.
    """
    if ckpt_path != "last":
        problem, run = verify(ckpt_path)
        if problem == "no such file":
            raise ConfigError(f"ckpt_path: no checkpoint {ckpt_path}")
        if problem is not None:
            intact = _newest_intact(candidates(Path(ckpt_path).parent), skip=Path(ckpt_path))
            hint = f"; the newest intact one beside it is {intact}" if intact else ""
            raise ConfigError(f"checkpoint {ckpt_path} is damaged: {problem}{hint}")
        return str(ckpt_path), run, None
    if folder is None:
        return ckpt_path, None, None
    found = candidates(folder)
    if not found:
        return ckpt_path, None, None
    problems = []
    for path in found:
        problem, run = verify(path)
        if problem is None:
            note = None
            if problems:
                note = f"note: {'; '.join(problems)}; resuming from the newest intact checkpoint of the run, {path}"
            return str(path), run, note
        problems.append(f"{path} is damaged ({problem})")
    raise ConfigError(f"no intact checkpoint to resume in {folder}: {'; '.join(problems)} (drop --ckpt_path and "
                      "move the folder away to start the run afresh)")


def _newest_intact(found: list[Path], skip: Path) -> Path | None:
    for path in found:
        if path.resolve() != skip.resolve() and verify(path)[0] is None:
            return path
    return None


def stale_parts(folder: str | Path) -> list[Path]:
    """Unfinished writes (``*.part``) a killed run left in ``folder``: never a checkpoint, safe to delete."""
    folder = Path(folder)
    return sorted(folder.glob("*.part")) if folder.is_dir() else []
