"""SUN on AntMaze-S explores beyond Random at the config's budget (~30 min per run on 2 CPU cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sun_lightning.run.cli import main

ROOT = Path(__file__).resolve().parents[2]


def final_coverage(seed: int, *extra: str) -> float:
    cli = main(["fit", "--config", str(ROOT / "conf/antmaze.yaml"), "--seed_everything", str(seed),
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.enable_progress_bar", "false", *extra])
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    return logger.final["explore/visits/coverage"]


@pytest.mark.slow
def test_sun_covers_more_of_antmaze_s_than_random(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sun = final_coverage(0)
    random = final_coverage(0, "--data.selector", "sun_lightning.goals.RandomActions")
    assert sun > random, (sun, random)
