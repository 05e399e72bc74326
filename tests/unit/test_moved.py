"""The earlier module names that saved configs, checkpoints and users' code name still import, as the same modules."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

from sun_lightning._moved import MOVED, MOVED_NAMES, new_name
from tests.layers import ROOT

OLD = sorted(name for name in MOVED if not name.endswith(".*"))


def in_a_fresh_interpreter(code: str) -> None:
    """Run ``code`` where nothing is imported yet (the resolver installed by the imports alone, as in a new run)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("old", OLD)
def test_an_earlier_name_is_the_new_module(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_the_top_level_callbacks_are_the_packages_callbacks():
    from callbacks.checkpoint import FrameCheckpoint
    from callbacks.exploration import ExplorationLogger

    from sun_lightning.callbacks import checkpoint, exploration

    assert FrameCheckpoint is checkpoint.FrameCheckpoint and ExplorationLogger is exploration.ExplorationLogger
    assert new_name("callbacks.results") == "sun_lightning.callbacks.results" and new_name("sun_lightning.keys") is None


def test_a_saved_config_yaml_with_the_earlier_class_paths_resolves():
    """What a run's saved ``config.yaml`` names (the logger's class path) imports, in a fresh interpreter."""
    in_a_fresh_interpreter("""
        from jsonargparse._typehints import import_object
        from sun_lightning.tracking.logger import SUNMLFlowLogger
        assert import_object('sun_lightning.mlflow_logger.SUNMLFlowLogger') is SUNMLFlowLogger
        from sun_lightning.run.precheck import signature
        assert 'tracking_uri' in signature('sun_lightning.mlflow_logger.SUNMLFlowLogger')
        assert 'every_frames' in signature('callbacks.checkpoint.FrameCheckpoint')
    """)

EARLIER_CONFIG = ROOT / "tests/data/point_maze_s_earlier_config.yaml"


def test_a_module_keeps_the_names_that_moved_out_of_it_lazily():
    """``sun_lightning.tracking.<name>`` of the flat module of earlier versions, and the RNG snapshot that
    ``sun_lightning.resume`` held, resolve to the modules that hold them now; naming alone imports no MLflow."""
    in_a_fresh_interpreter("""
        import sys
        from sun_lightning.tracking import run_name
        from sun_lightning.tracking.naming import run_name as now
        assert run_name is now and 'mlflow' not in sys.modules
        from sun_lightning.tracking import prepare_store
        from sun_lightning.tracking.store import prepare_store as now
        assert prepare_store is now
        from sun_lightning.resume import rng_state, set_rng_state
        from sun_lightning.checkpoints import rng
        assert (rng_state, set_rng_state) == (rng.rng_state, rng.set_rng_state)
        import sun_lightning.tracking as tracking
        assert not hasattr(tracking, 'nothing')
    """)
    for module, names in MOVED_NAMES.items():
        for name, holder in names.items():
            assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(holder), name)


def test_an_earlier_runs_saved_config_yaml_parses(tmp_path, monkeypatch):
    """The config.yaml an earlier version saved (its logger as ``sun_lightning.mlflow_logger``), with a callback
    named by the top-level ``callbacks`` path, goes through the CLI's parser to the classes of today.

    The file's ``actor_tau`` (an argument TD3SVF no longer has) is left out: a removed argument is not a moved
    import path, and the parser refuses it with its reason (tests/unit/run/test_precheck.py)."""
    from jsonargparse._typehints import import_object

    from sun_lightning.callbacks.progress import FrameProgressBar
    from sun_lightning.run import cli
    from sun_lightning.tracking.logger import SUNMLFlowLogger

    parsed = {}
    monkeypatch.setattr(cli.SUNCLI, "instantiate_classes", lambda self: parsed.update(config=self.config))
    monkeypatch.setattr(cli.SUNCLI, "_run_subcommand", lambda self, subcommand: None)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("".join(line for line in EARLIER_CONFIG.read_text().splitlines(keepends=True)
                              if "actor_tau:" not in line))
    cli.main(["fit", "--config", str(config), "--trainer.callbacks+", "callbacks.progress.FrameProgressBar"])
    trainer = parsed["config"].fit.trainer
    assert import_object(trainer.logger.class_path) is SUNMLFlowLogger
    assert import_object(trainer.callbacks[0].class_path) is FrameProgressBar
