"""The earlier module names that saved configs, checkpoints and users' code name still import, as the same modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from sun_lightning._moved import MOVED, new_name
from tests.layers import ROOT

OLD = sorted(name for name in MOVED if not name.endswith(".*"))


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
    code = ("from jsonargparse._typehints import import_object\n"
            "from sun_lightning.tracking.logger import SUNMLFlowLogger\n"
            "assert import_object('sun_lightning.mlflow_logger.SUNMLFlowLogger') is SUNMLFlowLogger\n"
            "from sun_lightning.run.precheck import signature\n"
            "assert 'tracking_uri' in signature('sun_lightning.mlflow_logger.SUNMLFlowLogger')\n"
            "assert 'every_frames' in signature('callbacks.checkpoint.FrameCheckpoint')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
