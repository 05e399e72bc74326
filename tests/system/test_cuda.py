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
    run, model = cli.datamodule.exploration, cli.model
    # (Lightning moves the module back to the CPU when fit ends)
    assert cli.trainer.strategy.root_device.type == "cuda" and run.storage.device.type == "cuda"
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
    run, model = cli.datamodule.exploration, cli.model.to("cuda")  # (Lightning moves the module back to the CPU when fit ends)
    assert model.padded(run.storage.device) and model.updates == 50
    m = model.batches_per_update
    batches = [run.sampler.sample(run.storage, run.scale(), count=m if m > 1 else None) for _ in range(4)]
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


@pytest.mark.parametrize("cls", ["TD3SVF", "EnsembleTD3SVF"])
def test_captured_update_equals_the_eager_one_and_reads_nothing_back(cls):
    """The update as CUDA graphs (one per plan, after their warm-up) takes the eager update's steps on the same
    batches, to float rounding, and a replayed update reads nothing back to the host."""
    from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF
    from sun_lightning.learners.td3 import TD3SVF
    from sun_lightning.replay.future import FutureGoalSampler
    from sun_lightning.replay.storage import GoalReplayStorage
    from tests.unit.learners.test_td3 import SPACE, storage_of_walks

    learner_cls = {"TD3SVF": TD3SVF, "EnsembleTD3SVF": EnsembleTD3SVF}[cls]
    learners = []
    for graph in (False, True):
        torch.manual_seed(0)
        learner = learner_cls(SPACE, cuda_graph=graph, target_noise=0.0).cuda()
        opts = learner.configure_optimizers()
        learner.optimizers = lambda opts=opts: opts
        learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
        learners.append(learner)
    eager, graphed = learners
    assert eager._graphs is None and graphed._graphs is not None
    storage, g = storage_of_walks(steps=400, capacity=400), torch.Generator().manual_seed(1)
    sampler = FutureGoalSampler(batch_size=256, horizon=50)
    count = eager.batches_per_update if eager.batches_per_update > 1 else None
    batches = [sampler.sample(storage, generator=g, count=count).to("cuda") for _ in range(12)]
    on_gpu = GoalReplayStorage(SPACE, storage.num_envs, storage.capacity, device="cuda")
    on_gpu.load_state_dict(storage.state_dict())
    sampler.sample(on_gpu, count=count)  # the bounds copied to the GPU once
    for batch in batches[:8]:  # two plans, three warm-up calls each: both captured by the sixth update
        eager.update(batch)
        graphed.update(batch)
    assert all(step.graph is not None for step in graphed._graphs.graphs.values())
    assert len(graphed._graphs.graphs) == 2
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches[8:]:
            graphed.update(batch)
        sampled = sampler.sample(on_gpu, count=count)  # drawing from D on the GPU reads nothing back either
        graphed._graphs.graphs[(False, False)].static_in.update_(sampled)  # the critic-only plan
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for batch in batches[8:]:
        eager.update(batch)
    eager.flush_finite_checks()
    graphed.flush_finite_checks()
    for (name, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    assert eager.pop_train_metrics().keys() == graphed.pop_train_metrics().keys()


def test_a_fit_with_graphs_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    """PointMaze-S on the GPU with the captured update, killed after a checkpoint and resumed: the final
    metrics of the run that was never interrupted (to float rounding: a resumed run captures anew)."""
    import math

    from tests.integration.test_resume import _args, _final, _kill_after

    monkeypatch.chdir(tmp_path)
    args = _args("point_maze_s.yaml", 1600, 800, 400, "--data.num_envs", "4", "--trainer.accelerator", "gpu",
                 "--trainer.devices", "1", "--model.init_args.cuda_graph", "true")
    cli = main(args)
    whole = _final(cli)
    assert cli.model._graphs is not None and cli.model._graphs.graphs
    folder = tmp_path / "checkpoints" / "PointMazeS-sun-seed0"
    for path in folder.iterdir():
        path.unlink()
    _kill_after(args, folder / "frames=000001200.ckpt", tmp_path)
    resumed = _final(main([*args, "--ckpt_path", "last"]))
    assert resumed.keys() == whole.keys()
    for name, value in whole.items():
        assert math.isclose(resumed[name], value, rel_tol=1e-3, abs_tol=1e-4), (name, resumed[name], value)


@pytest.mark.parametrize("ensemble", [False, True])
def test_captured_dqn_update_equals_the_eager_one_and_reads_nothing_back(ensemble, monkeypatch):
    """The DQN update (and its ensemble's) as a CUDA graph: every step's next state a row of its own, the eager
    update's weights to float rounding (no dropout, fixed target draws), and nothing read back on replay."""
    from sun_lightning.learners.dqn import DQNSVF
    from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF
    from tests.unit.learners.test_dqn import SPACE as GRID, consistent_batch

    fixed = torch.tensor([2, 0, 3, 1], device="cuda")
    monkeypatch.setattr(EnsembleDQNSVF, "draw_target_index", lambda self, device=None: fixed)
    cls = EnsembleDQNSVF if ensemble else DQNSVF
    learners = []
    for graph in (False, True):
        torch.manual_seed(0)
        learner = cls(GRID, dropout=0.0, cuda_graph=graph).cuda()
        opt = learner.configure_optimizers()
        learner.optimizers = lambda opt=opt: opt
        learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
        learners.append(learner)
    eager, graphed = learners

    def batch(seed):
        if not ensemble:
            return consistent_batch(8, 16, seed).to("cuda")
        return torch.stack([consistent_batch(8, 16, 10 * seed + m) for m in range(4)]).to("cuda")

    batches = [batch(seed) for seed in range(8)]
    for b in batches[:4]:  # three warm-up calls, then the capture
        eager.update(b)
        graphed.update(b)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for b in batches[4:]:
            graphed.update(b)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for b in batches[4:]:
        eager.update(b)
    graphed.flush_finite_checks()
    for (name, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
