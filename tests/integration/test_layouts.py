"""Gridworlds from a layout string (a public extension point): ``data.layout`` in a config gives the
gridworld of that map under ``data.env_id``; a map that cannot work is one error naming the problem."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import mlflow
import numpy as np
import pytest

from sun_lightning.run.cli import main
from sun_lightning.exploration.datamodule import ExplorationDataModule
from sun_lightning.envs.gridworlds import register_layout
from sun_lightning.envconfig.layout import GRID_MAZE, LAYOUTS, THREE_ROOM, parse_layout
from sun_lightning.envs.registry import goal_space
from sun_lightning.errors import ConfigError
from sun_lightning.results.snapshot import HeatmapSnapshot

ROOT = Path(__file__).resolve().parents[2]

# ThreeRoom's map as a user would paste it into a YAML block: indented, with a blank line.
_rows = textwrap.indent(THREE_ROOM.strip("\n"), "    ").splitlines()
THREE_ROOM_TEXT = "\n" + "\n".join(_rows[:7] + [""] + _rows[7:]) + "\n"
GRID_MAZE_TEXT = GRID_MAZE


def test_a_layout_string_gives_the_dynamics_of_the_built_in_world_it_copies():
    three, built_in = parse_layout(THREE_ROOM_TEXT), LAYOUTS["ThreeRoom"]
    assert (three.rows, three.cols, three.num_actions) == (built_in.rows, built_in.cols, 4)
    assert np.array_equal(three.next_tile, built_in.next_tile) and np.array_equal(three.terminal, built_in.terminal)
    assert np.array_equal(three.wall, built_in.wall) and three.coverable == built_in.coverable
    # the same start tiles, each equally likely (ThreeRoom's own weights are SPEC §6's 0.475 / 0.475 / 0.05)
    assert np.array_equal(three.start_probs > 0, built_in.start_probs > 0)
    assert np.allclose(three.start_probs[three.start_probs > 0], 1 / 3)
    maze, built_in = parse_layout(GRID_MAZE_TEXT, num_actions=9), LAYOUTS["GridMaze"]  # G ends on "stay"
    assert np.array_equal(maze.next_tile, built_in.next_tile) and np.array_equal(maze.terminal, built_in.terminal)
    assert maze.coverable == built_in.coverable


@pytest.mark.parametrize(("text", "message"), [
    ("", "data.layout is empty: give one line per row (W wall, . free, Q "),
    ("\n  \n", "data.layout is empty"),
    ("S . .\n. . X", "data.layout: unknown symbol 'X' at row 1, column 2 (W wall, . free, "),
    ("S . .\n- - -\n. s .", "data.layout: unknown symbol 's' at row 1, column 1 "),  # rows count tiles, not '-' lines
    ("S.G", "data.layout: unknown symbol 'S.G' at row 0, column 0 (W wall, . free, Q move replaced by a random one "
            "half the time, S start, G terminal; tiles separated by spaces"),
    ("- - -", "data.layout has no tiles, only walls between rows"),
    ("S . .\n. . . .", "data.layout: row 1 has 4 tiles, row 0 has 3: every row needs the same number"),
    (". . .\n. G .", "data.layout has no start tile S"),
    ("S . W G", "data.layout: the terminal G at row 0, column 3 cannot be reached from any start S"),
    ("S . .\n- - -\n. . G", "data.layout: the terminal G at row 1, column 2 cannot be reached"),
])
def test_a_layout_that_cannot_work_names_the_problem(text, message):
    with pytest.raises(ConfigError) as error:
        parse_layout(text)
    assert str(error.value).startswith(message), str(error.value)


def test_reachability_follows_the_actions():
    with pytest.raises(ConfigError, match="row 1, column 2"):
        parse_layout("S . W\nW W G")  # cut off for the 4 straight moves...
    parse_layout("S . W\nW W G", num_actions=9)  # ...not for a diagonal one (as GridMaze's start pocket is left)


def test_the_layout_is_registered_under_its_own_id():
    register_layout("sun_lightning/TestRoomA-v0", "S . G")
    space = goal_space("sun_lightning/TestRoomA-v0")
    assert space.grid_shape == (1, 3) and space.exact_counts and space.coverable == (0, 1)  # G ends on entry
    register_layout("sun_lightning/TestRoomA-v0", "S . .\n. . G")  # the same id again: the new map
    assert goal_space("sun_lightning/TestRoomA-v0").grid_shape == (2, 3)
    with pytest.raises(ConfigError, match="sun_lightning/ThreeRoom-v0 is a built-in environment"):
        register_layout("sun_lightning/ThreeRoom-v0", "S . G")
    with pytest.raises(ConfigError, match=r"needs an id of the form sun_lightning/<Name>-v0, got 'TestRoom'"):
        register_layout("TestRoom", "S . G")
    with pytest.raises(ConfigError, match="unknown symbol 'X' at row 0, column 2"):  # checked when the data is built
        ExplorationDataModule(env_id="sun_lightning/TestRoomB-v0", total_frames=600, warmup_frames=400, layout="S . X")


def _readme_layout_config() -> str:
    """The YAML block of the "Custom gridworld" section of docs/custom-envs.md."""
    section = (ROOT / "docs" / "custom-envs.md").read_text().split("## Custom gridworld", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_readme_custom_gridworld_config_trains(tmp_path, monkeypatch):
    """The documented example as written, for a few hundred frames: the run learns on that map, heatmaps draw it."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "corridor.yaml"
    config.write_text(_readme_layout_config())
    store = f"sqlite:///{tmp_path}/mlruns/mlflow.db"  # absolute: MLflow keeps one engine per URI in a process
    cli = main(["fit", "--config", str(config), "--data.total_frames", "600", "--data.warmup_frames", "400",
                "--metrics.log_every_frames", "200", "--metrics.verbose", "false", "--results.fractions", "[1.0]",
                "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.tracking_uri", store])
    exploration = cli.datamodule.exploration
    assert exploration.config.env_id == "sun_lightning/Corridor-v0" and exploration.vector_env.layout is LAYOUTS["sun_lightning/Corridor-v0"]
    assert exploration.frames == 600 and cli.model.updates == 200
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sun_lightning").experiment_id])
    assert run.info.run_name == "Corridor-sun-seed0" and run.data.params["data.env_id"] == "sun_lightning/Corridor-v0"
    npz = client.download_artifacts(run.info.run_id, "heatmaps/heatmaps_100.npz", str(tmp_path))
    snapshot = HeatmapSnapshot.load(npz)
    layout = LAYOUTS["sun_lightning/Corridor-v0"]
    assert snapshot.visits.shape == (layout.rows, layout.cols) == (4, 9)
    assert snapshot.visits.sum() == 600 and snapshot.visits[layout.wall.reshape(4, 9)].sum() == 0
