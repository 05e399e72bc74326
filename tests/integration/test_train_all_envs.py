"""Every config in conf/ trains to completion at a reduced budget (issue: classic control, gridworlds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sun_lightning.run.cli import main

# Four configs run by default (a radius-pseudocount env, the k-NN metric, the TD3 variant, and the README's
# first command, on MuJoCo); the rest take ~10 s each and are marked slow (three_room also runs end to end
# in tests/integration/test_cli.py).
FAST = {"mountain_car.yaml", "lunar_lander_full.yaml", "point_maze_s.yaml", "antmaze.yaml"}
CONFIGS = [
    name if name in FAST else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(p.name for p in (Path(__file__).resolve().parents[2] / "conf").glob("*.yaml"))
]


@pytest.mark.parametrize("config", CONFIGS)
def test_config_trains_to_completion(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main([
        "fit", "--config", str(Path(__file__).resolve().parents[2] / "conf" / config),
        "--data.total_frames", "320", "--data.warmup_frames", "288", "--data.num_envs", "2",
        "--metrics.log_every_frames", "160", "--metrics.verbose", "false",
        "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
    ])
    logger = next(cb for cb in cli.trainer.callbacks if cb.__class__.__name__ == "ExplorationLogger")
    run = cli.datamodule.exploration
    assert run.frames == 320 and cli.model.updates == int(32 * run.config.updates_per_frame)
    assert 0 < logger.final["explore/visits/coverage"] <= 1
    assert 0 <= logger.final["explore/visits/entropy"] <= 1
    if cli.datamodule.goal_space.goal_dims is None and not cli.datamodule.goal_space.exact_counts:
        assert "explore/visits/knn_entropy" in logger.final  # LunarLanderFull's metric
