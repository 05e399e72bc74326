"""What a launch continues, decided before anything is built: the run's checkpoint folder (a fresh run never
writes into another run's), the checkpoint ``--ckpt_path`` names (verified, and refused if another run wrote it),
and the MLflow run it continues."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jsonargparse import Namespace

from sun_lightning.callbacks.checkpoint import MLFLOW_RUN_FILE, mlflow_run_of
from sun_lightning.checkpoints import run_folders
from sun_lightning.checkpoints.identity import asked_identity, check_fits, recorded_identity
from sun_lightning.checkpoints.integrity import resolve_checkpoint
from sun_lightning.checkpoints.safe_pickle import read_checkpoint
from sun_lightning.errors import ConfigError

def choose_folder(config: Namespace, base: str | Path) -> int:
    """Set ``checkpoint.dirpath`` to the run's folder under ``base`` and return its number (0: ``base``).

    A fresh run never writes into a folder that holds another run's checkpoints (it gets ``<base>-v<N>``);
    ``--ckpt_path last`` continues the newest run of the name; a named checkpoint of one of these folders
    continues in its own folder (:mod:`sun_lightning.checkpoints.run_folders`). The launch holds its folder
    while it lives: a fresh launch beside it takes another, ``--ckpt_path last`` beside it is refused.
    """
    ckpt_path = config.get("ckpt_path")
    if ckpt_path == "last":
        folder, number = run_folders.newest_folder(base)
        if _primary() and (who := run_folders.holder(folder)) is not None:
            raise run_folders.in_use_error(folder, who)
    else:
        own = run_folders.folder_of(ckpt_path, base) if ckpt_path else None
        folder, number = own or run_folders.fresh_folder(base, claims=_primary())
    config.checkpoint.dirpath = str(folder)
    return number


def resumed_note(base: str | Path, checkpoint: str) -> str | None:
    """The line saying which run ``--ckpt_path last`` continues, where several runs share the name (``base``,
    ``base-v1``, ...): the newest; ``None`` where there is one."""
    found = run_folders.versions(base)
    if len(found) < 2:
        return None
    earlier = ", ".join(str(folder) for _, folder in found[:-1])
    return (f"note: --ckpt_path last resumes {checkpoint}, the newest of the {len(found)} runs named "
            f"{Path(base).name} (earlier: {earlier}; continue one with --ckpt_path <its last.ckpt>)")


def _primary() -> bool:
    """Whether this is the launch itself, not one of DDP's other processes (they run the CLI again after the
    launch has claimed its folder, and take the same one)."""
    return all(int(os.environ.get(rank) or 0) == 0 for rank in ("LOCAL_RANK", "NODE_RANK"))


def claim_folder(config: Namespace) -> None:
    """Hold the run's checkpoint folder while this process lives (:func:`~sun_lightning.checkpoints.run_folders.claim`),
    once every check has passed: a launch refused before it runs leaves the folder as it was."""
    folder = config.get("checkpoint") and config.checkpoint.get("dirpath")
    if folder and _primary() and config.get("trainer", {}).get("enable_checkpointing") is not False:
        run_folders.claim(folder)


def check_checkpoint(config: Namespace, seed: int | None, method: str) -> None:
    """Verify the checkpoint ``--ckpt_path`` names (``last``: the newest intact one of the run, with a note where
    that is not ``last.ckpt``) and refuse one another run wrote, before anything is built."""
    folder = config.checkpoint.get("dirpath") if config.get("checkpoint") is not None else None
    path, run, note = resolve_checkpoint(str(config.ckpt_path), folder)
    if note:
        print(note, file=sys.stderr, flush=True)
    if path == "last":
        if folder is None or (Path(folder) / MLFLOW_RUN_FILE).is_file():
            return  # a launch killed before its first checkpoint: it starts again, in its own MLflow run
        raise ConfigError(f"nothing to resume: {folder} holds no checkpoint of this run (drop --ckpt_path last to "
                          "start it, or name a checkpoint file)")
    config.ckpt_path = path
    if config.get("weights_only") is None:
        config.weights_only = True  # tensors and plain containers only (docs/faults.md: checkpoints are code)
    state = read_checkpoint(path, config.weights_only)  # refused here in one line, not inside Lightning's load
    check_fits(path, run if run is not None else recorded_identity(state), asked_identity(config, seed, method))


def resumed_run(config: Namespace) -> str | None:
    """The MLflow run id held by the checkpoint ``fit --ckpt_path`` resumes from, if any (``last``: the run's own)."""
    path = config.get("ckpt_path")
    if not path:
        return None
    if path == "last":  # no checkpoint yet (else it is resolved by now): the MLflow run a killed launch began
        marker = Path(config.checkpoint.dirpath) / MLFLOW_RUN_FILE
        try:
            return json.loads(marker.read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            return None
    if not Path(path).is_file():
        return None  # Lightning reports a missing checkpoint itself
    return mlflow_run_of(path)
