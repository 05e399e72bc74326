"""An MLflow logger that a failing store does not stop.

Lightning's :class:`~lightning.pytorch.loggers.MLFlowLogger` raises whatever its store raises, so a store that
becomes unwritable mid-run (permissions, a full disk, a sqlite file locked for longer than its 20 s busy
timeout, a tracking server that went away) ends hours of training at the next ``log_metrics``, with the run
left ``RUNNING`` and no final checkpoint. :class:`SUNMLFlowLogger` keeps the same constructor and the same
runs, and turns such a failure into one warning line: what could not be written is held back, in order, and
retried; what still cannot be written when the run ends is saved in a local folder, so nothing is lost.

Only the start is strict: a run that cannot be created or read at all raises
:class:`~sun_lightning.errors.ConfigError` (one line, exit code 2), since nothing has been trained yet.
"""

from __future__ import annotations

import os
import re
import time
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.utilities.logger import _add_prefix, _convert_params, _flatten_dict
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from sun_lightning.errors import ConfigError
from sun_lightning.tracking.queue import FALLBACK_DIR, DurableQueue, Record
from sun_lightning.tracking.store import absolute_uri, is_server, limit_http_retries, quiet_store_logs, store_error

class SUNMLFlowLogger(MLFlowLogger):
    """Lightning's MLflow logger, with writes that survive a failing store.

    Every write (metrics, params, artifacts, the run's final status) joins one
    :class:`~sun_lightning.tracking.queue.DurableQueue` (``queue``), sent in order, held back and retried while the
    store fails, and saved in ``mlflow-unlogged/<run name>-<run id>/`` if it never takes them; a resumed run logs
    each metric step once.

    Our callbacks write through :meth:`log_text`, :meth:`log_artifacts` and :meth:`set_status` and read through
    :meth:`logged_params`, :meth:`metric_history`, :attr:`run_name` and :meth:`summary_lines`, which keep working
    while the store does not. ``experiment`` is MLflow's client itself, without those guards.

    The arguments are :class:`~lightning.pytorch.loggers.MLFlowLogger`'s.
    """

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = os.getenv("MLFLOW_TRACKING_URI"),
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        # Absolute: MLflow keeps one database engine per URI in a process, so a relative ``sqlite:///mlruns/...``
        # would log a second in-process run (a notebook, after a chdir) into the first folder's store.
        tracking_uri = absolute_uri(tracking_uri) if tracking_uri else tracking_uri
        super().__init__(experiment_name=experiment_name, run_name=run_name, tracking_uri=tracking_uri, tags=tags,
                         save_dir=save_dir, log_model=log_model, prefix=prefix, artifact_location=artifact_location,
                         run_id=run_id, synchronous=synchronous)
        if is_server(self._tracking_uri):
            limit_http_retries()
        self._history: dict[str, dict[int, float]] = {}  # every metric logged by this process, for the curves
        self._finalized = False
        self._fallback_root = Path(FALLBACK_DIR).resolve()  # the launch folder's, whatever chdir happens later
        self.queue = DurableQueue(absolute_uri(self._tracking_uri), lambda: self.fallback_dir)
        self._resumed = run_id is not None  # a run continued from a checkpoint (the CLI passes its run id)
        self._stored: dict[str, set[int]] | None = None  # its metrics' steps already in the store, read once

    # ---- the run ------------------------------------------------------------------------------------
    @property
    def experiment(self):
        """MLflow's client; creating or reading the run at start-up fails with a one-line ``ConfigError``.

        A resumed run reads ``RUNNING`` again while it continues (``mlflow ui`` and the study runner would
        otherwise see the ``KILLED`` or ``FAILED`` its interruption left until it finishes)."""
        if self._initialized:
            return self._mlflow_client
        try:
            with quiet_store_logs():
                client = super().experiment
                if self._resumed and self._initialized:
                    client.update_run(self._run_id, status="RUNNING")
                return client
        except Exception as error:
            raise store_error(self._tracking_uri, error) from error

    @property
    def run_name(self) -> str:
        """The run's name: the one it was given, else the store's, else its id."""
        if self._run_name:
            return self._run_name
        run = self._read(lambda client: client.get_run(self.run_id))
        return run.info.run_name if run is not None else str(self._run_id)

    @property
    def unlogged(self) -> int:
        """Records written to the fallback folder instead of the store."""
        return self.queue.unlogged

    @property
    def fallback_dir(self) -> Path:
        """Where writes that the store never takes are saved: ``mlflow-unlogged/<run name>-<run id>/``."""
        return self._fallback_root / f"{self._run_name or 'run'}-{self._run_id}"

    # ---- writes -------------------------------------------------------------------------------------
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        values = {}
        for key, value in _add_prefix(dict(metrics), self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                continue  # MLflow metrics are numbers (Lightning's logger drops strings too)
            values[re.sub("[^a-zA-Z0-9_/. -]+", "", key)] = float(value)
        step = step or 0
        for key, value in values.items():
            self._history.setdefault(key, {})[step] = value
        # A run resumed from a checkpoint logs again the steps between that checkpoint and the crash (with the
        # same values: the resume is exact); each step reaches the store once.
        stored = self._stored_steps()
        values = {key: value for key, value in values.items() if step not in stored.get(key, ())}
        if values:
            self._submit(Record("metrics", values, step=step, timestamp=int(time.time() * 1000)))

    def _stored_steps(self) -> dict[str, set[int]]:
        """The steps each metric of a resumed run has in the store (empty for a new run, or a store that fails)."""
        if self._stored is None:
            self._stored = {}
            run = self._read(lambda client: client.get_run(self.run_id)) if self._resumed else None
            for key in run.data.metrics if run is not None else ():
                history = self._read(lambda client, key=key: client.get_metric_history(self.run_id, key)) or []
                self._stored[key] = {metric.step for metric in history}
        return self._stored

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        flat = {key: str(value)[:250] for key, value in _flatten_dict(_convert_params(params)).items()}
        items = list(flat.items())
        for start in range(0, len(items), 100):  # MLflow's largest batch of params
            self._submit(Record("params", dict(items[start : start + 100])))

    @rank_zero_only
    def log_text(self, text: str, artifact_file: str) -> None:
        """Log ``text`` as the run's artifact ``artifact_file`` (e.g. ``config.yaml``)."""
        self._submit(Record("text", text=text, artifact=artifact_file))

    @rank_zero_only
    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        """Log the files of ``folder`` under ``artifact_path`` of the run. The folder may be deleted afterwards:
        files the store does not take at once are copied into the fallback folder first."""
        files = sorted(path for path in Path(folder).rglob("*") if path.is_file())
        record = Record("files", files=files, root=Path(folder), artifact=artifact_path)
        self._submit(record)
        if self.queue.holds(record):
            self.queue.spool(record)

    @rank_zero_only
    def set_status(self, status: str) -> None:
        """End the run with MLflow's ``status`` (``FINISHED``, ``FAILED``, ``KILLED``)."""
        self._submit(Record("status", status=status))
        if self._finalized and self.queue.pending:
            self.queue.save_unlogged()

    @rank_zero_only
    def save(self) -> None:
        self._flush()

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if not self._initialized:
            return
        status = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}.get(status, status)
        if self._checkpoint_callback:
            self._scan_and_log_checkpoints(self._checkpoint_callback)
        self.queue.pending.append(Record("status", status=status))
        self._finalized = True
        if not self._flush(force=True):
            self.queue.save_unlogged()

    def _scan_and_log_checkpoints(self, checkpoint_callback) -> None:
        # ``log_model``: the checkpoints stay on disk whatever the store does, so a failure here only warns.
        try:
            with quiet_store_logs():
                super()._scan_and_log_checkpoints(checkpoint_callback)
        except Exception as error:
            self.queue.fault(error)

    # ---- reads that survive the store ---------------------------------------------------------------
    def logged_params(self) -> dict[str, str]:
        """The params the run has in the store (a resumed run's), or ``{}`` when it cannot be read."""
        run = self._read(lambda client: client.get_run(self.run_id))
        return dict(run.data.params) if run is not None else {}

    def metric_history(self, key: str) -> list[tuple[int, float]]:
        """``(step, value)`` of a metric, by step: the store's history with what this process logged (and may
        hold back) on top."""
        history = self._read(lambda client: client.get_metric_history(self.run_id, key)) or []
        merged = {m.step: m.value for m in history}
        merged.update(self._history.get(key, {}))
        return sorted(merged.items())

    def summary_lines(self) -> list[str]:
        """The end-of-run lines about the run: its name, id and experiment, its artifacts, where writes the store
        refused went, and the ``mlflow ui`` command for its store."""
        run = self._read(lambda client: client.get_run(self.run_id))
        experiment = self._read(lambda client: client.get_experiment(run.info.experiment_id)) if run else None
        name = experiment.name if experiment is not None else self._experiment_name
        lines = [f"MLflow run: {self.run_name} (id {self._run_id}, experiment {name!r})"]
        if run is not None:
            lines.append(f"results (params, metrics, heatmaps, curves, config): {run.info.artifact_uri}")
        if self.queue.unlogged:
            lines.append(f"not in MLflow (its store failed): {self.queue.unlogged} records in {self.fallback_dir}")
        lines.append(f"browse: mlflow ui --backend-store-uri {absolute_uri(self._tracking_uri)}")
        return lines

    # ---- the store ----------------------------------------------------------------------------------
    def _submit(self, record: Record) -> None:
        self.queue.submit(record, self._sender)

    def _flush(self, force: bool = False) -> bool:
        return self.queue.flush(self._sender, force)

    def _sender(self):
        """Connects (a run that cannot be created raises its one-line error here) and returns the record sender."""
        client, run_id = self.experiment, self.run_id

        def send(record: Record) -> None:
            with quiet_store_logs():
                self._write(client, run_id, record)

        return send

    def _write(self, client, run_id: str, record: Record) -> None:
        from mlflow.entities import Metric, Param

        if record.kind == "metrics":
            metrics = [Metric(key, value, record.timestamp, record.step) for key, value in record.values.items()]
            client.log_batch(run_id, metrics=metrics, **self._log_batch_kwargs)
        elif record.kind == "params":
            params = [Param(key, value) for key, value in record.values.items()]
            client.log_batch(run_id, params=params, **self._log_batch_kwargs)
        elif record.kind == "text":
            client.log_text(run_id, record.text, record.artifact)
        elif record.kind == "files":
            for path in record.files:
                if path.exists():  # a later copy of the same artifact may have replaced it in the fallback folder
                    folder = path.parent.relative_to(record.root).as_posix()
                    parts = [part for part in (record.artifact, None if folder == "." else folder) if part]
                    client.log_artifact(run_id, str(path), "/".join(parts) or None)
        else:
            client.set_terminated(run_id, record.status)

    def _read(self, read):
        """``read(client)``, or ``None`` when the store fails (which counts as a fault)."""
        try:
            with quiet_store_logs():
                return read(self.experiment)
        except ConfigError:  # the run could not be created: the start-up error, not a fault to ride out
            raise
        except Exception as error:
            self.queue.fault(error)
            return None
