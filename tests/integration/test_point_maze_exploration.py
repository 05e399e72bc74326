"""SUN on PointMaze-S explores beyond Random at the config's budget (~10 min per seed on 2 CPU cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sun_lightning.run.cli import main

ROOT = Path(__file__).resolve().parents[2]


def final_coverage(seed: int, *extra: str) -> float:
    cli = main(["fit", "--config", str(ROOT / "conf/point_maze_s.yaml"), "--seed_everything", str(seed),
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                *extra])
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    return logger.final["explore/visits/coverage"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sun_covers_more_of_point_maze_s_than_random(seed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sun = final_coverage(seed)
    random = final_coverage(seed, "--data.selector", "sun_lightning.goals.RandomActions")
    assert sun > random, (sun, random)
