"""The run that wrote a checkpoint, checked against the command that loads it.

Every checkpoint records its writing run (:func:`run_identity`): environment, learner, method, seed,
env frames, ``num_envs`` and ``layout`` (the shapes of the saved environments) and the learner's
hyperparameters, with the package version and the checkpoint format. ``fit --ckpt_path`` compares it
with what the command asks for (:func:`asked_identity`) before anything is built, and refuses a
checkpoint of another run in one line naming the keys that differ (:func:`check_fits`). What may change
on resume: ``data.total_frames``, ``data.capacity`` and the trainer, metrics, checkpoint and results
settings.

Formats: 1, the checkpoints before identities were recorded (no format field, no sidecar: their learner and
hyperparameters are read from the file itself, their environment is not known); 2, with
:data:`FORMAT_KEY` and :data:`RUN_KEY`. :func:`migrate` brings a format-1 checkpoint to format 2.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from typing import Any

from sun_lightning.errors import ConfigError
from sun_lightning.tracking.naming import env_name, method_of

FORMAT = 2
#: Checkpoint keys of the format and of the writing run's identity.
FORMAT_KEY, RUN_KEY = "sun_format", "sun_run"
#: Identity fields a resumed run must share with the checkpoint, and the config key each comes from.
CONFIG_KEYS = {"env_id": "data.env_id", "learner": "model.class_path", "method": "data.selector",
               "seed": "seed_everything", "num_envs": "data.num_envs", "layout": "data.layout"}


@functools.cache
def package_version() -> str:
    try:
        return importlib.metadata.version("sun_lightning")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _plain(value: Any) -> Any:
    """A JSON-comparable copy (``1e-3`` and ``0.001`` alike, tuples as lists)."""
    return json.loads(json.dumps(value, default=str))


def model_arguments(hparams: dict) -> dict[str, Any]:
    """A learner's constructor arguments from its saved hyperparameters (Lightning's own ``_`` keys dropped)."""
    return _plain({key: value for key, value in hparams.items() if not key.startswith("_") and key != "goal_space"})


def run_identity(model, *, env_id: str, selector: str, seed: int, frames: int, num_envs: int,
                 layout: str | None) -> dict[str, Any]:
    """The identity of a run (stored in each checkpoint and its sidecar): its learner ``model`` (a LightningModule,
    its class and hyperparameters), its environment, selection rule (its class name), seed, env frames so far,
    ``num_envs`` and gridworld ``layout``."""
    return _plain({
        "format": FORMAT, "version": package_version(),
        "env_id": env_id, "learner": f"{type(model).__module__}.{type(model).__qualname__}",
        "method": method_of(selector), "seed": seed, "frames": frames,
        "num_envs": num_envs, "layout": layout, "model": model_arguments(dict(model.hparams)),
    })


def asked_identity(config, seed: int | None, method: str) -> dict[str, Any]:
    """What a ``fit`` config asks for, in :func:`run_identity`'s fields (before anything is instantiated)."""
    model = config.get("model")
    init_args = model.get("init_args") if model is not None else None
    return _plain({
        "env_id": config.data.env_id, "learner": str(model.get("class_path")) if model is not None else None,
        "method": method, "seed": seed, "num_envs": config.data.get("num_envs"), "layout": config.data.get("layout"),
        "model": model_arguments(init_args.as_dict() if init_args is not None else {}),
    })


def recorded_identity(state: dict) -> dict[str, Any]:
    """The writing run's identity a loaded checkpoint holds (a format-1 one's: learner, hyperparameters, frames)."""
    return migrate(dict(state))[RUN_KEY]


def migrate(checkpoint: dict) -> dict:
    """Bring a checkpoint to format :data:`FORMAT` in place (format 1 had no format field and no identity)."""
    if checkpoint.get(FORMAT_KEY, 1) == 1:
        hparams = checkpoint.get("hyper_parameters", {})
        frames = checkpoint.get("ExplorationDataModule", {}).get("frames")
        checkpoint[RUN_KEY] = {"format": 1, "version": "0.1.0 or earlier", "frames": frames,
                               "learner": hparams.get("_class_path"), "model": model_arguments(hparams)}
        checkpoint[FORMAT_KEY] = FORMAT
    return checkpoint


def describe(run: dict[str, Any], written: bool) -> str:
    """``ThreeRoom-v0, DQNSVF, sun, seed 0`` (with frames and version for a checkpoint's writer)."""
    parts = [env_name(run["env_id"]) if run.get("env_id") else "environment not recorded",
             str(run.get("learner") or "?").rsplit(".", 1)[-1], str(run.get("method") or "?"), f"seed {run.get('seed')}"]
    if written:
        parts += [f"{run.get('frames')} frames", f"sun_lightning {run.get('version')}"]
    return ", ".join(parts)


def differences(saved: dict[str, Any], asked: dict[str, Any]) -> list[str]:
    """``key (saved → asked)`` for every recorded field the command changes."""
    out = []
    for field, key in CONFIG_KEYS.items():
        if field in saved and saved[field] != asked.get(field):
            out.append(f"{key} ({saved[field]} → {asked.get(field)})")
    saved_model, asked_model = saved.get("model") or {}, asked.get("model") or {}
    for name in sorted(saved_model.keys() & asked_model.keys()):
        if saved_model[name] != asked_model[name]:
            out.append(f"model.init_args.{name} ({saved_model[name]} → {asked_model[name]})")
    return out


def check_fits(path: str, saved: dict[str, Any], asked: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` (one line) if the checkpoint at ``path`` was written by another run.

    Args:
        path: the checkpoint (named in the message).
        saved: its writing run's identity (:func:`run_identity` or :func:`legacy_identity`).
        asked: the command's (:func:`asked_identity`).
    """
    if int(saved.get("format", 1)) > FORMAT:
        raise ConfigError(f"checkpoint {path} was written by sun_lightning {saved.get('version')} (checkpoint format "
                          f"{saved.get('format')}); this is sun_lightning {package_version()}, which reads formats 1 to "
                          f"{FORMAT}: resume it with the version that wrote it")
    differ = differences(saved, asked)
    if differ:
        raise ConfigError(f"checkpoint {path} was written by another run ({describe(saved, True)}) than this command "
                          f"asks for ({describe({**saved, **asked}, False)}): {', '.join(differ)} "
                          f"{'differs' if len(differ) == 1 else 'differ'} (resume with "
                          "the config that wrote it, or drop --ckpt_path to start a new run)")
