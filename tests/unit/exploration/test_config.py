"""The ``data`` config is one frozen value (exploration/config.py): its fields are the CLI's ``data`` keys with their
defaults, its checks say what the DataModule said, and the DataModule holds it whole and builds from it whole."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest
import torch
import yaml

from sun_lightning.errors import ConfigError
from sun_lightning.exploration import datamodule as datamodule_module
from sun_lightning.exploration.config import COUNTS, DataConfig
from sun_lightning.exploration.datamodule import ExplorationDataModule
from sun_lightning.goals import RandomActions
from sun_lightning.goals.sun import SUNAdaptive
from tests.helpers import THREE_ROOM

FIELDS = [field.name for field in dataclasses.fields(DataConfig)]


def test_the_config_is_frozen():
    config = DataConfig(env_id=THREE_ROOM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_envs = 8
    assert dataclasses.replace(config, num_envs=8).num_envs == 8 and config.num_envs == 4


def test_its_defaults_are_what_print_config_prints(tmp_path, monkeypatch, capsys):
    from sun_lightning.run.cli import main

    monkeypatch.chdir(tmp_path)
    minimal = tmp_path / "minimal.yaml"
    minimal.write_text(f"model:\n  class_path: sun_lightning.learners.dqn.DQNSVF\ndata:\n  env_id: {THREE_ROOM}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(minimal), "--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)["data"]
    assert list(printed) == FIELDS
    defaults = DataConfig(env_id=THREE_ROOM)
    for name in FIELDS:
        if name != "selector":
            assert printed[name] == getattr(defaults, name), name
    assert printed["selector"]["class_path"] == "sun_lightning.goals.SUNAdaptive"
    assert isinstance(defaults.selector, SUNAdaptive)
    assert printed["selector"]["init_args"] == {name: p.default for name, p in
                                                inspect.signature(SUNAdaptive).parameters.items()}


@pytest.mark.parametrize("changes, line", [
    ({"total_frames": 0}, "data.total_frames must be positive, got 0"),
    ({"num_envs": 0}, "data.num_envs must be positive, got 0"),
    ({"warmup_frames": -1}, "data.warmup_frames must be >= 0, got -1"),
    ({"rho": -1.0}, "data.rho must be positive, got -1.0"),
    ({"updates_per_frame": -0.5}, "data.updates_per_frame must be >= 0, got -0.5"),
    ({"counts": "exact"}, "data.counts must be one of pseudo, binned, got 'exact'"),
    ({"backend": "cuda"}, "data.backend must be one of auto, native, torch, got 'cuda'"),
    ({"total_frames": 100, "warmup_frames": 100},
     "data.total_frames (100) must exceed data.warmup_frames (100): learning starts after the warm-up, so this run "
     "would learn nothing (raise total_frames or lower warmup_frames)"),
], ids=["total_frames", "num_envs", "warmup_frames", "rho", "updates_per_frame", "counts", "backend", "budget"])
def test_each_check_says_the_line_the_data_module_said(changes, line):
    with pytest.raises(ConfigError) as raised:
        DataConfig(env_id=THREE_ROOM, **changes)
    assert str(raised.value) == line
    with pytest.raises(ConfigError) as raised:  # the DataModule says it too, before it builds anything
        ExplorationDataModule(env_id=THREE_ROOM, **changes)
    assert str(raised.value) == line


def test_a_run_that_learns_nothing_needs_no_learning_budget():
    assert COUNTS == ("pseudo", "binned")
    assert not DataConfig(env_id=THREE_ROOM, total_frames=100, warmup_frames=100, selector=RandomActions()).learns
    assert not DataConfig(env_id=THREE_ROOM, total_frames=100, warmup_frames=100, updates_per_frame=0.0).learns
    assert DataConfig(env_id=THREE_ROOM).learns


def test_the_data_module_takes_the_config_fields_and_nothing_of_its_own():
    params = inspect.signature(ExplorationDataModule.__init__).parameters
    assert [p.kind for name, p in params.items() if name != "self"] == [inspect.Parameter.VAR_KEYWORD]
    assert not set(FIELDS) & set(params)
    dm = ExplorationDataModule(env_id=THREE_ROOM, num_envs=2)
    assert dm.config == DataConfig(env_id=THREE_ROOM, num_envs=2, selector=dm.config.selector)
    assert not set(FIELDS) & set(vars(dm)), "config values copied onto the DataModule"
    with pytest.raises(TypeError, match="num_env"):
        ExplorationDataModule(env_id=THREE_ROOM, num_env=2)


@pytest.mark.parametrize("total, rounded", [(1000, 1000), (1001, 1004)])
def test_the_data_module_builds_from_its_one_config_whole(total, rounded, monkeypatch, capsys):
    received = []

    def build(config, **given):
        received.append((config, given))
        return SimpleNamespace(closed=False)

    monkeypatch.setattr(datamodule_module, "build", build)
    dm = ExplorationDataModule(env_id=THREE_ROOM, total_frames=total, warmup_frames=400, num_envs=4)
    before = dm.config
    learner = SimpleNamespace(device=torch.device("cpu"))
    dm.trainer = SimpleNamespace(lightning_module=learner, strategy=SimpleNamespace(root_device=torch.device("cpu")),
                                 world_size=1, global_rank=0, is_global_zero=True, callbacks=[])
    dm.setup("fit")
    [(config, given)] = received
    assert config is dm.config and config == dataclasses.replace(before, total_frames=rounded)
    assert (config is before) == (total == rounded)  # rounded: a new value, the one the DataModule holds now
    assert before.total_frames == total  # frozen: the config as given is untouched
    assert set(given) == {"goal_space", "custom", "agent", "rank", "world_size", "gather_device", "events", "device"}
    assert given["goal_space"] is dm.goal_space and given["events"] is dm.events and given["agent"] is learner
    assert dm.budget.total_frames == rounded and dm.trainer.callbacks == [dm.steps]
    note = "note: data.total_frames (1001) is not a whole number of vector steps of 4 frames: the run collects 1004"
    assert (note in capsys.readouterr().err) == (total != rounded)
