"""The durable write queue of the MLflow logger (:class:`~sun_lightning.tracking.logger.SUNMLFlowLogger`).

Every write joins one queue and is sent in order; while the store fails, writes are held back and retried, and
what the store never takes is saved in a local fallback folder, so nothing is lost.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sun_lightning.tracking.store import first_line

#: MLflow error codes that mean the request itself is wrong (a param changed on a resumed run), not the store:
#: retrying cannot help, so they are raised as before.
REJECTED = frozenset({"INVALID_PARAMETER_VALUE"})
#: Where held-back records go when the store never takes them: ``<cwd>/mlflow-unlogged/<run name>-<run id>/``.
FALLBACK_DIR = "mlflow-unlogged"
#: The fallback folder's record of metrics, params and run statuses, one JSON object a line.
FALLBACK_FILE = "unlogged.jsonl"


@dataclass
class Record:
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


class DurableQueue:
    """Writes held for a store, sent in order by :meth:`flush` with ``send(record)``.

    The first failure prints one line on stderr naming the store, the error and the fallback folder. The queue is
    retried at the next write once ``RETRY_EVERY_S`` has passed (the wait doubles with each failed retry, up to
    ``RETRY_MAX_S``: a store that stalls every call, such as a locked sqlite file or an unanswering server, does
    not stall every log). A write is sent exactly once. What the store refuses to the end is written by
    :meth:`save_unlogged` to the fallback folder: ``unlogged.jsonl`` (metrics with their steps, params, the run's
    status; one JSON object a line) and the artifacts under ``artifacts/``.

    Args:
        store: the store's URI, for the warning.
        fallback_dir: the fallback folder (called when needed: it names the run, whose id may come later).
    """

    #: Seconds after a failed write before the queue is tried again (doubling per failed retry).
    RETRY_EVERY_S = 30.0
    #: The longest wait between two retries.
    RETRY_MAX_S = 600.0
    #: Writes held in memory; beyond this the oldest go to the fallback file at once.
    MAX_PENDING = 10_000

    def __init__(self, store: str, fallback_dir: Callable[[], Path]) -> None:
        self.store, self._fallback_dir = store, fallback_dir
        self.pending: deque[Record] = deque()
        self.failures = 0  # failed attempts since the last successful one
        self.retry_at = 0.0  # time.monotonic() before which the queue is not retried
        self.warned = False
        self.unlogged = 0  # records written to the fallback folder instead of the store

    @property
    def fallback_dir(self) -> Path:
        return self._fallback_dir()

    @property
    def artifacts_dir(self) -> Path:
        return self.fallback_dir / "artifacts"

    def holds(self, record: Record) -> bool:
        return any(held is record for held in self.pending)

    def submit(self, record: Record, send: Callable[[], Callable[[Record], None]]) -> None:
        """Queue ``record`` and try to send the queue (``send()`` connects and returns the sender)."""
        self.pending.append(record)
        if len(self.pending) > self.MAX_PENDING:
            # The oldest go to disk rather than grow memory without bound; they reach the store no more.
            self.save_unlogged([self.pending.popleft()])
        self.flush(send)

    def flush(self, send: Callable[[], Callable[[Record], None]], force: bool = False) -> bool:
        """Send the held-back writes in order; ``False`` if some are still held (the store failed, or waits)."""
        if not self.pending:
            return True
        if not force and time.monotonic() < self.retry_at:
            return False
        sender = send()
        while self.pending:
            record = self.pending[0]
            try:
                sender(record)
            except Exception as error:
                if getattr(error, "error_code", None) in REJECTED:
                    self.pending.popleft()
                    raise
                self.fault(error)
                return False
            self.pending.popleft()
            if record.kind == "files" and record.root == self.artifacts_dir:
                for path in record.files:  # in the store now: the spooled copy goes
                    path.unlink(missing_ok=True)
        self.failures, self.retry_at = 0, 0.0
        return True

    def fault(self, error: BaseException) -> None:
        """A store call failed: wait before the next attempt, and say so once."""
        self.failures += 1
        self.retry_at = time.monotonic() + min(self.RETRY_EVERY_S * 2 ** (self.failures - 1), self.RETRY_MAX_S)
        if not self.warned:
            self.warned = True
            print(f"warning: MLflow store {self.store} failed ({first_line(error)}): training "
                  "goes on; metrics, params and artifacts are held back and retried, and what the store still refuses "
                  f"at the end is saved in {self.fallback_dir}", file=sys.stderr, flush=True)

    def spool(self, record: Record) -> None:
        """Copy a held-back artifact folder into the fallback folder: the caller's copy may be temporary."""
        target = self.artifacts_dir / (record.artifact or "")
        copies = []
        for path in record.files:
            copy = target / path.relative_to(record.root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
            copies.append(copy)
        # The copies' folders below artifacts/ are their artifact paths.
        record.files, record.root, record.artifact = copies, self.artifacts_dir, None

    def save_unlogged(self, records: list[Record] | None = None) -> None:
        """Write held-back records (all by default) to the fallback folder and forget them."""
        if records is None:
            records, self.pending = list(self.pending), deque()
        lines = []
        for record in records:
            if record.kind == "text":
                path = self.artifacts_dir / record.artifact
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(record.text)
            elif record.kind == "files" and record.root != self.artifacts_dir:
                self.spool(record)
            if (line := record.as_json()) is not None:
                lines.append(json.dumps(line) + "\n")
        self.fallback_dir.mkdir(parents=True, exist_ok=True)
        with open(self.fallback_dir / FALLBACK_FILE, "a") as out:
            out.writelines(lines)
        self.unlogged += len(records)
