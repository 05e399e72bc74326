"""What the collector writes into D during a fit: the environment's own transitions, episode ends and resets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sun_lightning import keys
from sun_lightning.run.cli import main
from sun_lightning.envconfig.layout import LAYOUTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("config", "layout"), [("four_room_stuck.yaml", "FourRoomStuck"), ("three_room.yaml", "ThreeRoom")])
def test_stored_steps_follow_the_layout_across_episode_ends(config, layout, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    num_envs, frames = 2, 1000
    cli = main(["fit", "--config", str(ROOT / "conf" / config), "--data.total_frames", str(frames),
                "--data.warmup_frames", "600", "--data.num_envs", str(num_envs), "--metrics.verbose", "false",
                "--trainer.logger", "false", "--trainer.enable_checkpointing", "false", "--seed_everything", "0"])
    run, grid = cli.datamodule.exploration, LAYOUTS[layout]
    assert run.frames == frames and len(run.storage) == frames and run.storage.steps == frames // num_envs
    table = run.storage.columns
    # Entry (t, b) of env b's stream sits at t·B + b: reshape to [steps, B].
    col = {name: table.get(name)[:frames].reshape(frames // num_envs, num_envs, *table.get(name).shape[1:]).numpy()
           for name in (keys.OBS, keys.ACTION, keys.NEXT_OBS, keys.TERMINATED, keys.EPISODE_END)}
    tile, nxt, action = col[keys.OBS].argmax(-1), col[keys.NEXT_OBS].argmax(-1), col[keys.ACTION]
    end, terminated = col[keys.EPISODE_END], col[keys.TERMINATED]
    spawns = set(np.flatnonzero(grid.start_probs > 0).tolist())
    lengths = []
    for b in range(num_envs):
        assert tile[0, b] in spawns
        since = 0
        for t in range(len(tile)):
            since += 1
            # The stored next state is the true one (not the reset observation): reachable from (tile, action),
            # by any action on a Q tile.
            allowed = set(grid.next_tile[tile[t, b]].tolist()) if grid.random_tile[tile[t, b]] else {grid.next_tile[tile[t, b], action[t, b]]}
            assert nxt[t, b] in allowed, (b, t)
            assert end[t, b] == (terminated[t, b] or since == grid.horizon), (b, t)
            if t + 1 < len(tile):
                if end[t, b]:
                    assert tile[t + 1, b] in spawns  # a fresh episode
                else:
                    assert tile[t + 1, b] == nxt[t, b]
            if end[t, b]:
                lengths.append(since)
                since = 0
    assert grid.horizon in lengths  # at least one truncation crossed
