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

import json
import os
import re
import shutil
import sys
import time
from argparse import Namespace
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.utilities.logger import _add_prefix, _convert_params, _flatten_dict
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from sun_lightning.errors import ConfigError
from sun_lightning.tracking import (absolute_uri, first_line, is_server, limit_http_retries, quiet_store_logs,
                                    store_error)

#: MLflow error codes that mean the request itself is wrong (a param changed on a resumed run), not the store:
#: retrying cannot help, so they are raised as before.
REJECTED = frozenset({"INVALID_PARAMETER_VALUE"})
#: Where held-back records go when the store never takes them: ``<cwd>/mlflow-unlogged/<run name>-<run id>/``.
FALLBACK_DIR = "mlflow-unlogged"
#: The fallback folder's record of metrics, params and run statuses, one JSON object a line.
FALLBACK_FILE = "unlogged.jsonl"


@dataclass
class _Record:
    """One write held back for the store: ``metrics`` (one log call), ``params`` (≤ 100), ``text`` (an artifact
    file's contents), ``files`` (artifact files, copied into the fallback folder) or ``status`` (the run's end)."""

    kind: Literal["metrics", "params", "text", "files", "status"]
    values: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    timestamp: int = 0
    text: str = ""
    artifact: str | None = None  # artifact file (text) or folder (files) in the run
    files: list[Path] = field(default_factory=list)
    root: Path | None = None  # the folder ``files`` lie in; their artifact paths are relative to it
    status: str = ""

    def as_json(self) -> dict[str, Any] | None:
        """Its line of the fallback file (``None`` for artifacts: those are files beside it)."""
        if self.kind == "metrics":
            return {"kind": "metrics", "step": self.step, "timestamp": self.timestamp, "metrics": self.values}
        if self.kind == "params":
            return {"kind": "params", "params": self.values}
        if self.kind == "status":
            return {"kind": "status", "status": self.status}
        return None


class SUNMLFlowLogger(MLFlowLogger):
    """Lightning's MLflow logger, with writes that survive a failing store.

    Every write (metrics, params, artifacts, the run's final status) joins one queue and is sent in order; the
    first failure prints one line on stderr naming the store, the error and the fallback folder, and the run
    goes on. The queue is retried at the next write once ``RETRY_EVERY_S`` has passed (the wait doubles with each
    failed retry, up to ``RETRY_MAX_S``: a store that stalls every call, such as a locked sqlite file or an
    unanswering server, does not stall every log), and in :meth:`finalize` regardless. A write is sent exactly
    once. What the store still refuses at the end goes to ``mlflow-unlogged/<run name>-<run id>/``:
    ``unlogged.jsonl`` (metrics with their steps, params, the run's status; one JSON object a line) and the
    artifacts under ``artifacts/``, as they would have been in the run.

    Our callbacks write through :meth:`log_text`, :meth:`log_artifacts` and :meth:`set_status` and read through
    :meth:`logged_params`, :meth:`metric_history`, :attr:`run_name` and :meth:`summary_lines`, which keep working
    while the store does not. ``experiment`` is MLflow's client itself, without those guards.

    The arguments are :class:`~lightning.pytorch.loggers.MLFlowLogger`'s.
    """

    #: Seconds after a failed write before the queue is tried again (doubling per failed retry).
    RETRY_EVERY_S = 30.0
    #: The longest wait between two retries.
    RETRY_MAX_S = 600.0
    #: Writes held in memory; beyond this the oldest go to the fallback file at once.
    MAX_PENDING = 10_000

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
        self._pending: deque[_Record] = deque()
        self._history: dict[str, dict[int, float]] = {}  # every metric logged by this process, for the curves
        self._failures = 0  # failed attempts since the last successful one
        self._retry_at = 0.0  # time.monotonic() before which the queue is not retried
        self._warned = False
        self._finalized = False
        self._fallback_root = Path(FALLBACK_DIR).resolve()  # the launch folder's, whatever chdir happens later
        self.unlogged = 0  # records written to the fallback folder instead of the store
        self._resumed = run_id is not None  # a run continued from a checkpoint (the CLI passes its run id)
        self._stored: dict[str, set[int]] | None = None  # its metrics' steps already in the store, read once

    # ---- the run ------------------------------------------------------------------------------------
    @property
    def experiment(self):
        """MLflow's client; creating or reading the run at start-up fails with a one-line ``ConfigError``."""
        if self._initialized:
            return self._mlflow_client
        try:
            with quiet_store_logs():
                return super().experiment
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
            self._submit(_Record("metrics", values, step=step, timestamp=int(time.time() * 1000)))

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
            self._submit(_Record("params", dict(items[start : start + 100])))

    @rank_zero_only
    def log_text(self, text: str, artifact_file: str) -> None:
        """Log ``text`` as the run's artifact ``artifact_file`` (e.g. ``config.yaml``)."""
        self._submit(_Record("text", text=text, artifact=artifact_file))

    @rank_zero_only
    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        """Log the files of ``folder`` under ``artifact_path`` of the run. The folder may be deleted afterwards:
        files the store does not take at once are copied into the fallback folder first."""
        files = sorted(path for path in Path(folder).rglob("*") if path.is_file())
        record = _Record("files", files=files, root=Path(folder), artifact=artifact_path)
        self._submit(record)
        if any(held is record for held in self._pending):
            self._spool(record)

    @rank_zero_only
    def set_status(self, status: str) -> None:
        """End the run with MLflow's ``status`` (``FINISHED``, ``FAILED``, ``KILLED``)."""
        self._submit(_Record("status", status=status))
        if self._finalized and self._pending:
            self._save_unlogged()

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
        self._pending.append(_Record("status", status=status))
        self._finalized = True
        if not self._flush(force=True):
            self._save_unlogged()

    def _scan_and_log_checkpoints(self, checkpoint_callback) -> None:
        # ``log_model``: the checkpoints stay on disk whatever the store does, so a failure here only warns.
        try:
            with quiet_store_logs():
                super()._scan_and_log_checkpoints(checkpoint_callback)
        except Exception as error:
            self._fault(error)

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
        if self.unlogged:
            lines.append(f"not in MLflow (its store failed): {self.unlogged} records in {self.fallback_dir}")
        lines.append(f"browse: mlflow ui --backend-store-uri {absolute_uri(self._tracking_uri)}")
        return lines

    # ---- the queue ----------------------------------------------------------------------------------
    def _submit(self, record: _Record) -> None:
        self._pending.append(record)
        if len(self._pending) > self.MAX_PENDING:
            # The oldest go to disk rather than grow memory without bound; they reach the store no more.
            self._save_unlogged([self._pending.popleft()])
        self._flush()

    def _flush(self, force: bool = False) -> bool:
        """Send the held-back writes in order; ``False`` if some are still held (the store failed, or waits)."""
        if not self._pending:
            return True
        if not force and time.monotonic() < self._retry_at:
            return False
        client, run_id = self.experiment, self.run_id
        while self._pending:
            record = self._pending[0]
            try:
                with quiet_store_logs():
                    self._write(client, run_id, record)
            except Exception as error:
                if getattr(error, "error_code", None) in REJECTED:
                    self._pending.popleft()
                    raise
                self._fault(error)
                return False
            self._pending.popleft()
            if record.kind == "files" and record.root == self._artifacts_dir:
                for path in record.files:  # in the store now: the spooled copy goes
                    path.unlink(missing_ok=True)
        self._failures, self._retry_at = 0, 0.0
        return True

    def _write(self, client, run_id: str, record: _Record) -> None:
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

    def _fault(self, error: BaseException) -> None:
        """A store call failed: wait before the next attempt, and say so once."""
        self._failures += 1
        self._retry_at = time.monotonic() + min(self.RETRY_EVERY_S * 2 ** (self._failures - 1), self.RETRY_MAX_S)
        if not self._warned:
            self._warned = True
            print(f"warning: MLflow store {absolute_uri(self._tracking_uri)} failed ({first_line(error)}): training "
                  "goes on; metrics, params and artifacts are held back and retried, and what the store still refuses "
                  f"at the end is saved in {self.fallback_dir}", file=sys.stderr, flush=True)

    def _read(self, read):
        """``read(client)``, or ``None`` when the store fails (which counts as a fault)."""
        try:
            with quiet_store_logs():
                return read(self.experiment)
        except ConfigError:  # the run could not be created: the start-up error, not a fault to ride out
            raise
        except Exception as error:
            self._fault(error)
            return None

    # ---- the fallback folder ------------------------------------------------------------------------
    @property
    def _artifacts_dir(self) -> Path:
        return self.fallback_dir / "artifacts"

    def _spool(self, record: _Record) -> None:
        """Copy a held-back artifact folder into the fallback folder: the caller's copy may be temporary."""
        target = self._artifacts_dir / (record.artifact or "")
        copies = []
        for path in record.files:
            copy = target / path.relative_to(record.root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
            copies.append(copy)
        # The copies' folders below artifacts/ are their artifact paths.
        record.files, record.root, record.artifact = copies, self._artifacts_dir, None

    def _save_unlogged(self, records: list[_Record] | None = None) -> None:
        """Write held-back records (all by default) to the fallback folder and forget them."""
        if records is None:
            records, self._pending = list(self._pending), deque()
        lines = []
        for record in records:
            if record.kind == "text":
                path = self._artifacts_dir / record.artifact
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(record.text)
            elif record.kind == "files" and record.root != self._artifacts_dir:
                self._spool(record)
            if (line := record.as_json()) is not None:
                lines.append(json.dumps(line) + "\n")
        self.fallback_dir.mkdir(parents=True, exist_ok=True)
        with open(self.fallback_dir / FALLBACK_FILE, "a") as out:
            out.writelines(lines)
        self.unlogged += len(records)
