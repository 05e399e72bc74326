"""The embedded MLflow store: its location, and its creation when several runs start at once."""

from __future__ import annotations

import fcntl
from pathlib import Path

import mlflow

MLFLOW_DIR = Path("mlruns")
MLFLOW_URI = f"sqlite:///{MLFLOW_DIR}/mlflow.db"


def prepare_store(tracking_uri: str, experiment: str, artifact_location: str | None = None) -> None:
    """Create a sqlite MLflow store and its experiment once, under a file lock.

    Runs started together on a fresh store (a comparison with ``--jobs 2``)
    otherwise race: both create the schema (one fails inside MLflow's
    migrations) or both create the experiment (one fails on the unique name).
    Other tracking URIs are left to MLflow.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return
    database = Path(tracking_uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        client = mlflow.MlflowClient(tracking_uri)  # creates and migrates the schema
        if client.get_experiment_by_name(experiment) is None:
            client.create_experiment(experiment, artifact_location=artifact_location)
