"""The unattended soak (``bench/soak.py``): ThreeRoom and PointMaze-S fits killed with SIGKILL 20 times at
random moments (every other one while a checkpoint is being written) and resumed with ``--ckpt_path last`` end with
the uninterrupted run's metrics, every checkpoint intact, one FINISHED MLflow run with each metric step once, and a
flat memory footprint (each launch killed while writing a checkpoint within 10 % of the uninterrupted run's RSS at
that checkpoint; none 10 % over its peak)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


@pytest.mark.slow
@pytest.mark.parametrize("config", ["three_room", "point_maze_s"])
def test_twenty_kills_and_resumes_end_as_the_uninterrupted_run(config, tmp_path):
    from soak import soak

    report = soak(config, tmp_path, cycles=20)
    assert report["cycles"] == 20 and report["killed_during_write"] >= 5, report["launches"]
    assert report["final_rc"] == 0 and report["metrics_compared"] > 0 and report["metrics_differing"] == []
    assert report["damaged_checkpoints"] == {} and report["part_files"] == []
    assert report["mlflow_runs"] == 1 and report["mlflow_status"] == ["FINISHED"] and report["steps_logged_twice"] == []
    assert len(report["rss_pairs_mib"]) > 1 and report["rss_spread"] <= 0.10, report["rss_pairs_mib"]
    assert report["rss_over_reference"] <= 0.10, (report["reference_peak_rss_mib"], report["launches"])
