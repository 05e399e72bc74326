"""A failing MLflow store does not stop training: an unwritable store warns once and the run completes,
keeping what it could not log; an unreachable tracking server fails at once, in one line.

The end-to-end test breaks the sqlite store mid-run by putting a folder where sqlite writes its rollback journal:
every later read and write of the store then fails ("disk I/O error"), for root too, which ``chmod`` would not
stop. Before :class:`~sun_lightning.tracking.logger.SUNMLFlowLogger`, the run crashed at its next ``log_metrics``.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, TEMPORARILY_UNAVAILABLE

from sun_lightning.errors import ConfigError
from sun_lightning.tracking.logger import SUNMLFlowLogger
from sun_lightning.tracking.queue import FALLBACK_DIR, FALLBACK_FILE
from sun_lightning.tracking.store import HTTP_RETRY_ENV, check_server, prepare_store

ROOT = Path(__file__).resolve().parents[3]
COVERAGE = "explore/visits/coverage"


# ---- end to end ---------------------------------------------------------------------------------
def _break_store(database: Path, timeout: float = 60) -> Path:
    """Make a sqlite store unusable, for any user: a folder where sqlite puts its rollback journal."""
    journal = database.with_name(database.name + "-journal")
    deadline = time.monotonic() + timeout
    while True:
        try:
            journal.mkdir()
            return journal
        except FileExistsError:  # a write is in progress and holds the real journal: try again after it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def test_a_store_that_fails_mid_run_warns_once_and_the_run_completes(tmp_path):
    steps = [200, 400, 600]
    args = [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf/three_room.yaml"),
            "--data.total_frames", "600", "--data.warmup_frames", "400", "--data.num_envs", "4",
            "--metrics.log_every_frames", "200", "--trainer.enable_progress_bar", "false",
            "--results.fractions", "[1.0]"]
    database = tmp_path / "mlruns" / "mlflow.db"
    journal = None
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            for line in proc.stdout:
                if line.startswith(f"[frames {steps[0]}]"):  # the first metrics are in the store
                    journal = _break_store(database)
                    break
            out = proc.stdout.read()
            proc.wait(timeout=600)
        finally:
            proc.kill()
    err = (tmp_path / "stderr.txt").read_text()
    assert journal is not None, err[-3000:]
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    warnings = [line for line in err.splitlines() if "MLflow store" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: MLflow store sqlite:///"), warnings
    checkpoint = tmp_path / "checkpoints" / "ThreeRoom-sun-seed0" / "last.ckpt"
    assert checkpoint.is_file()

    (fallback,) = (tmp_path / FALLBACK_DIR).iterdir()
    assert str(fallback) in warnings[0] and str(fallback) in out  # the warning and the summary say where
    records = [json.loads(line) for line in (fallback / FALLBACK_FILE).read_text().splitlines()]
    saved = [r["step"] for r in records if r["kind"] == "metrics" and COVERAGE in r["metrics"]]
    assert {"kind": "status", "status": "FINISHED"} in records
    artifacts = fallback / "artifacts"
    assert (artifacts / "checkpoint_path.txt").read_text().strip() == str(checkpoint.resolve())
    assert (artifacts / "heatmaps" / "heatmaps_100.png").is_file() and (artifacts / "curves.png").is_file()

    journal.rmdir()  # the store works again: what it holds and what was saved beside it add up to the whole run
    client = mlflow.MlflowClient(f"sqlite:///{database}")
    (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    stored = [m.step for m in client.get_metric_history(run.info.run_id, COVERAGE)]
    assert steps[0] in stored and steps[-1] in saved
    assert sorted(stored + saved) == steps  # each logged once, in one place or the other
    assert run.info.status == "RUNNING"  # its end could not be written; the fallback file has it
    assert fallback.name == f"ThreeRoom-sun-seed0-{run.info.run_id}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_tracking_server_fails_at_once_in_one_line(tmp_path):
    uri = f"http://127.0.0.1:{_free_port()}"
    proc = subprocess.run([sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf/three_room.yaml"),
                           "--trainer.logger.init_args.tracking_uri", uri],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # MLflow alone retried > 150 s
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    assert lines == [lines[-1]], lines
    assert lines[-1].startswith(f"error: MLflow tracking server {uri} is unreachable (")
    assert "--trainer.logger.init_args.tracking_uri sqlite:///mlruns/mlflow.db" in lines[-1]


# ---- start-up checks ----------------------------------------------------------------------------
class _Silent:
    """A server that accepts connections and never answers."""

    def __enter__(self) -> str:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_the_server_check_answers_within_its_timeout():
    with pytest.raises(ConfigError, match=r"^MLflow tracking server http://127\.0\.0\.1:\d+ is unreachable \("):
        check_server(f"http://127.0.0.1:{_free_port()}")
    with _Silent() as uri:
        start = time.monotonic()
        with pytest.raises(ConfigError, match="is unreachable"):
            check_server(uri, timeout=1.0)
        assert time.monotonic() - start < 5


def test_a_server_that_answers_passes_and_mlflow_retries_are_capped(monkeypatch, tmp_path):
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)  # any answer means the server is there

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in HTTP_RETRY_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")  # the user's own setting stays
    try:
        prepare_store(f"http://127.0.0.1:{server.server_address[1]}", "anything")
    finally:
        server.shutdown()
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == HTTP_RETRY_ENV["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"


def test_a_store_that_cannot_be_used_at_start_is_a_one_line_error(tmp_path):
    (tmp_path / "mlruns" / "mlflow.db").mkdir(parents=True)  # not a database
    unusable = r"^MLflow store sqlite:///\S+mlflow\.db cannot be used \(.*--trainer\.logger false"
    with pytest.raises(ConfigError, match=unusable):
        prepare_store(f"sqlite:///{tmp_path}/mlruns/mlflow.db", "sun_lightning")
    store = f"sqlite:///{tmp_path}/ok/mlflow.db"
    prepare_store(store, "sun_lightning")
    _break_store(tmp_path / "ok" / "mlflow.db")
    logger = SUNMLFlowLogger("sun_lightning", tracking_uri=store)
    with pytest.raises(ConfigError, match="cannot be used"):  # the run cannot be created: before any training
        _ = logger.run_id


def test_a_resumed_run_reads_running_until_it_ends(tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    client = mlflow.MlflowClient(store)
    run = client.create_run(client.create_experiment("e"))
    client.set_terminated(run.info.run_id, "KILLED")  # what Ctrl-C leaves
    logger = SUNMLFlowLogger("e", tracking_uri=store, run_id=run.info.run_id)
    logger.log_metrics({COVERAGE: 0.5}, step=10)
    logger.save()
    assert client.get_run(run.info.run_id).info.status == "RUNNING"
    logger.finalize("success")
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, COVERAGE)] == [0.5]
    # a fresh run is RUNNING as MLflow creates it, and a second read of the client changes nothing
    fresh = SUNMLFlowLogger("e", tracking_uri=store)
    assert fresh.experiment is fresh.experiment and client.get_run(fresh.run_id).info.status == "RUNNING"


def test_a_deleted_experiment_is_a_one_line_error_that_says_how_to_restore_it(tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    prepare_store(store, "study")
    client = mlflow.MlflowClient(store)
    experiment_id = client.get_experiment_by_name("study").experiment_id
    client.delete_experiment(experiment_id)
    with pytest.raises(ConfigError, match=rf"^MLflow experiment 'study' of {store} is deleted .*"
                                          rf"mlflow experiments restore --experiment-id {experiment_id}`"):
        prepare_store(store, "study")
    prepare_store(store, "another")  # another name is fine


def test_a_run_killed_while_mlflow_creates_the_store_leaves_it_creatable(tmp_path):
    """SIGKILL in the middle of MLflow's schema migration of a fresh store (found by the soak): the next
    launch creates the store and its experiment, instead of failing on MLflow's half-migrated tables forever."""
    database = tmp_path / "mlruns" / "mlflow.db"
    code = (f"from sun_lightning.tracking import prepare_store; prepare_store('sqlite:///{database}', 'sun_lightning')")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    def written(path: Path) -> bool:
        return path.exists() and path.stat().st_size > 0

    def part_written() -> bool:
        return any(written(part) for part in database.parent.glob("mlflow.db.init*"))

    while not (part_written() or written(database)) and proc.poll() is None and time.monotonic() - start < 120:
        time.sleep(0.002)
    time.sleep(0.3)  # inside the migration (its first tables are written; it takes seconds)
    proc.kill()
    assert proc.wait() == -9  # killed mid-way, not finished
    assert not database.exists() or database.stat().st_size == 0  # nothing half-made under the store's name
    prepare_store(f"sqlite:///{database}", "sun_lightning")
    assert list(database.parent.glob("mlflow.db.init*")) == []  # the killed creator's file is gone
    assert mlflow.MlflowClient(f"sqlite:///{database}").get_experiment_by_name("sun_lightning") is not None


# ---- the queue, against a store that fails and recovers -------------------------------------------
class FlakyClient:
    """Stands in for MLflow's client: refuses every call while ``down``, records what it takes otherwise."""

    def __init__(self) -> None:
        self.down = False
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.params: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.artifacts: list[tuple[str | None, str, bytes]] = []
        self.statuses: list[str] = []

    def _serve(self) -> None:
        if self.down:
            raise MlflowException("(sqlite3.OperationalError) database is locked\n[SQL: INSERT ...]",
                                  error_code=TEMPORARILY_UNAVAILABLE)

    def log_batch(self, run_id, metrics=(), params=(), **kwargs):
        self._serve()
        if metrics:
            self.metrics.append((metrics[0].step, {m.key: m.value for m in metrics}))
        self.params.update({p.key: p.value for p in params})

    def log_text(self, run_id, text, artifact_file):
        self._serve()
        self.texts[artifact_file] = text

    def log_artifact(self, run_id, local_path, artifact_path=None):
        self._serve()
        self.artifacts.append((artifact_path, Path(local_path).name, Path(local_path).read_bytes()))

    def set_terminated(self, run_id, status):
        self._serve()
        self.statuses.append(status)

    def get_run(self, run_id):
        self._serve()
        info = SimpleNamespace(run_name="stored-name", experiment_id="0", artifact_uri="file:///artifacts")
        return SimpleNamespace(info=info, data=SimpleNamespace(params=dict(self.params)))

    def get_experiment(self, experiment_id):
        self._serve()
        return SimpleNamespace(name="sun_lightning")

    def get_metric_history(self, run_id, key):
        self._serve()
        return [SimpleNamespace(step=step, value=values[key]) for step, values in self.metrics if key in values]


@pytest.fixture
def flaky(tmp_path, monkeypatch):
    """A logger on a :class:`FlakyClient`, retrying at every write (no wait), in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    client = FlakyClient()
    logger = SUNMLFlowLogger("sun_lightning", run_name="Grid-sun-seed0", tracking_uri=f"sqlite:///{tmp_path}/none.db")
    logger._mlflow_client, logger._initialized, logger._run_id, logger._experiment_id = client, True, "run1", "0"
    logger.queue.RETRY_EVERY_S = 0.0
    return logger, client


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "MLflow store" in line]


def test_held_back_metrics_reach_the_store_in_order_exactly_once(flaky, capsys):
    logger, client = flaky
    client.down = True
    logger.log_metrics({"a": 1.0}, step=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"a": 2.0, "b": 5.0}, step=2)
    assert client.metrics == [] and client.params == {}
    (warning,) = _warnings(capsys)  # one line for several failures
    assert warning.startswith("warning: MLflow store sqlite:///") and "database is locked" in warning
    assert str(logger.fallback_dir) in warning
    client.down = False
    logger.log_metrics({"a": 3.0}, step=3)
    assert client.metrics == [(1, {"a": 1.0}), (2, {"a": 2.0, "b": 5.0}), (3, {"a": 3.0})]
    assert client.params == {"lr": "0.1"}
    logger.save()
    logger.finalize("success")
    assert len(client.metrics) == 3 and client.statuses == ["FINISHED"]
    assert not (Path(FALLBACK_DIR)).exists() and logger.unlogged == 0
    assert _warnings(capsys) == []


def test_retries_wait_between_attempts_and_the_end_forces_one(flaky):
    logger, client = flaky
    logger.queue.RETRY_EVERY_S = 3600.0
    client.down = True
    logger.log_metrics({"a": 1.0}, step=1)
    client.down = False
    logger.log_metrics({"a": 2.0}, step=2)  # within the wait: held back, not sent
    logger.save()
    assert client.metrics == []
    logger.finalize("failed")
    assert [step for step, _ in client.metrics] == [1, 2] and client.statuses == ["FAILED"]


def test_what_the_store_never_takes_is_saved_beside_the_run(flaky, tmp_path):
    logger, client = flaky
    client.down = True
    logger.log_metrics({"a": 1.0}, step=100)
    logger.log_hyperparams({"model": {"lr": 0.1}})
    logger.log_metrics({"a": 2.0}, step=200)
    logger.log_text("seed: 0\n", "config.yaml")
    pictures = tmp_path / "tmp-pictures"
    (pictures / "sub").mkdir(parents=True)
    (pictures / "sub" / "p.png").write_bytes(b"png")
    logger.log_artifacts(pictures, "heatmaps")
    shutil.rmtree(pictures)  # the caller's temporary folder: the logger kept a copy
    assert logger.metric_history("a") == [(100, 1.0), (200, 2.0)]  # the curves do not need the store
    logger.finalize("success")
    logger.set_status("KILLED")  # after the end too (Ctrl-C)

    folder = logger.fallback_dir
    assert folder == tmp_path / FALLBACK_DIR / "Grid-sun-seed0-run1"
    records = [json.loads(line) for line in (folder / FALLBACK_FILE).read_text().splitlines()]
    assert records[0]["kind"] == "metrics" and records[0]["step"] == 100 and records[0]["metrics"] == {"a": 1.0}
    assert records[1:] == [{"kind": "params", "params": {"model/lr": "0.1"}},
                           {"kind": "metrics", "step": 200, "timestamp": records[2]["timestamp"],
                            "metrics": {"a": 2.0}},
                           {"kind": "status", "status": "FINISHED"}, {"kind": "status", "status": "KILLED"}]
    assert (folder / "artifacts" / "config.yaml").read_text() == "seed: 0\n"
    assert (folder / "artifacts" / "heatmaps" / "sub" / "p.png").read_bytes() == b"png"
    assert client.metrics == [] and client.statuses == []
    lines = logger.summary_lines()
    assert lines[0] == "MLflow run: Grid-sun-seed0 (id run1, experiment 'sun_lightning')"
    assert f"7 records in {folder}" in lines[1]
    assert lines[-1].startswith("browse: mlflow ui --backend-store-uri sqlite:///")


def test_held_back_artifacts_are_sent_from_their_copy_which_then_goes(flaky, tmp_path):
    logger, client = flaky
    client.down = True
    pictures = tmp_path / "tmp-pictures"
    (pictures / "sub").mkdir(parents=True)
    (pictures / "sub" / "p.png").write_bytes(b"png")
    logger.log_artifacts(pictures, "heatmaps")
    shutil.rmtree(pictures)
    copy = logger.fallback_dir / "artifacts" / "heatmaps" / "sub" / "p.png"
    assert copy.is_file()
    client.down = False
    logger.log_text("x", "checkpoint_path.txt")
    assert client.artifacts == [("heatmaps/sub", "p.png", b"png")] and client.texts == {"checkpoint_path.txt": "x"}
    assert not copy.exists()


def test_a_rejected_write_is_raised_not_held(flaky):
    logger, client = flaky

    def reject(run_id, metrics=(), params=(), **kwargs):
        raise MlflowException("Changing param values is not allowed", error_code=INVALID_PARAMETER_VALUE)

    client.log_batch = reject
    with pytest.raises(MlflowException, match="Changing param values"):
        logger.log_hyperparams({"lr": 0.2})
    del client.log_batch  # the class's own again
    logger.log_metrics({"a": 1.0}, step=1)  # the rejected write does not block the queue
    assert client.metrics == [(1, {"a": 1.0})]
