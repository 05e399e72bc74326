"""The loop on a CUDA device (issue 16): skipped where no GPU is present."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sun_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("config", ["three_room.yaml", "mountain_car.yaml"])
def test_dqn_variant_trains_on_cuda(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / "conf" / config), "--data.total_frames", "800",
                "--data.warmup_frames", "600", "--data.num_envs", "2", "--metrics.verbose", "false",
                "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.accelerator", "gpu", "--trainer.devices", "1"])
    dm, model = cli.datamodule, cli.model
    assert model.device.type == "cuda" and dm.storage.device.type == "cuda"
    assert model.updates == 200 and all(p.device.type == "cuda" for p in model.parameters())
    assert all(torch.isfinite(p).all() for p in model.parameters())
