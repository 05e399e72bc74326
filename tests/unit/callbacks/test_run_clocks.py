"""The run's clocks of :class:`~sun_lightning.callbacks.exploration.ExplorationLogger`: wall and CPU seconds carried
across a resume, so that ``perf/run/minutes`` and ``perf/run/cpu_share`` cover every session of a run."""

from __future__ import annotations

import math
import time

from sun_lightning.callbacks.exploration import ExplorationLogger


def _started() -> ExplorationLogger:
    logger = ExplorationLogger(log_every_frames=100)
    logger._started, logger._seconds_before = time.perf_counter(), 0.0
    logger._cpu_started, logger._cpu_before = time.process_time(), 0.0
    logger._schedule = type("Schedule", (), {"next": 100})()
    logger._last_frames = 0
    return logger


def test_a_busy_second_counts_as_cpu_and_a_sleeping_one_does_not():
    logger = _started()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    busy = logger.run_cpu_seconds()
    time.sleep(0.3)
    wall, cpu = logger.run_seconds(), logger.run_cpu_seconds()
    assert 0.2 <= busy < 0.3 and cpu - busy < 0.05  # the sleep costs no CPU (however loaded the machine)
    assert wall >= 0.5 and cpu / wall < 0.6  # busy for 0.2 s of at least 0.5 s


def test_a_resumed_run_adds_its_sessions_and_an_older_checkpoint_leaves_the_share_unknown():
    logger = _started()
    logger.load_state_dict({"next": 200, "last_frames": 100, "seconds": 60.0, "cpu_seconds": 45.0})
    assert 60.0 <= logger.run_seconds() < 61.0 and 45.0 <= logger.run_cpu_seconds() < 46.0
    saved = logger.state_dict()
    assert saved["seconds"] >= 60.0 and saved["cpu_seconds"] >= 45.0

    older = _started()
    older.load_state_dict({"next": 200, "last_frames": 100, "seconds": 60.0})
    assert math.isnan(older.run_cpu_seconds())
