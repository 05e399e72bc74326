"""The loop on a CUDA device: skipped where no GPU is present."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sun_lightning.run.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("config", ["three_room.yaml", "mountain_car.yaml"])
def test_dqn_variant_trains_on_cuda(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / "conf" / config), "--data.total_frames", "800",
                "--data.warmup_frames", "600", "--data.num_envs", "2", "--metrics.verbose", "false",
                "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.accelerator", "gpu", "--trainer.devices", "1"])
    dm, model = cli.datamodule, cli.model
    # (Lightning moves the module back to the CPU when fit ends)
    assert cli.trainer.strategy.root_device.type == "cuda" and dm.storage.device.type == "cuda"
    assert model.updates == 200
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("learner", [("sun_lightning.learners.td3.TD3SVF",),
                                     ("sun_lightning.learners.ensemble_td3.EnsembleTD3SVF",
                                      "--data.selector", "sun_lightning.goals.ensemble.DISCOVER"),
                                     ("sun_lightning.learners.ensemble_td3.EnsembleTD3SVF",
                                      "--data.selector", "sun_lightning.goals.discover.DISCOVERTD3")])
def test_td3_variant_trains_on_cuda_in_bf16_without_host_syncs(learner, tmp_path, monkeypatch):
    """On CUDA the TD3 update takes the padded paths and reads nothing back to the host."""
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(ROOT / "conf" / "point_maze_s.yaml"), "--model", *learner,
                "--data.total_frames", "1200", "--data.warmup_frames", "1000", "--data.num_envs", "4",
                "--metrics.verbose", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.precision", "bf16-mixed"])
    dm, model = cli.datamodule, cli.model.to("cuda")  # (Lightning moves the module back to the CPU when fit ends)
    assert model.padded(dm.storage.device) and model.updates == 50
    m = model.batches_per_update
    batches = [dm.exploration.sampler.sample(dm.storage, dm.scale(), count=m if m > 1 else None) for _ in range(4)]
    opts = model.configure_optimizers()
    model.optimizers = lambda: opts
    model.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    model.update(batches[0])  # first calls may allocate lazily
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for batch in batches:
                model.update(batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    model.flush_finite_checks()
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
