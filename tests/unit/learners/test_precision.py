"""bf16 mixed precision through Lightning's switch: the TD3 update in bf16 against float32,
float32 targets and optimizer state, the precision choice, and a fit of each learner in bf16-mixed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from sun_lightning.learners import precision
from sun_lightning.run.cli import main
from sun_lightning.errors import NonFiniteLossError
from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF
from sun_lightning.learners.td3 import TD3SVF
from sun_lightning.replay.future import FutureGoalSampler
from test_td3 import SPACE, storage_of_walks

ROOT = Path(__file__).resolve().parents[3]
BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def manual(learner):
    """The learner stepped outside a Trainer: its own optimizers, plain backward."""
    opts = learner.configure_optimizers()
    learner.optimizers = lambda: opts
    learner.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    return opts


MID = dict(hidden=64, features=32, maxout_width=256, head_width=64)


def trained_state(learner_cls=TD3SVF, seed=0, **kwargs):
    """A learner (the paper's sizes unless ``kwargs`` say) after a few float32 updates (values away from their
    initial constant)."""
    torch.manual_seed(seed)
    learner = learner_cls(SPACE, **kwargs)
    storage = storage_of_walks(steps=200, num_envs=4, capacity=800, seed=seed)
    learner.observe(storage.get(torch.arange(800).view(200, 4).flatten(), ("observation",))["observation"])
    manual(learner)
    sampler = FutureGoalSampler(batch_size=256, horizon=50)
    m = learner.batches_per_update
    draw = (lambda g: sampler.sample(storage, generator=g, count=m)) if m > 1 else (lambda g: sampler.sample(storage, generator=g))
    for i in range(4):
        learner.update(draw(torch.Generator().manual_seed(100 + i)))
    return learner, draw(torch.Generator().manual_seed(7))


def test_bf16_critic_loss_and_targets_are_within_tolerance_of_float32():
    learner, batch = trained_state(target_noise=0.0)
    with torch.no_grad():
        target32, _ = learner.td_targets(batch)
        loss32, _ = learner.critic_loss(batch)
        with torch.autocast(**BF16):
            target16, _ = learner.td_targets(batch)
            loss16, _ = learner.critic_loss(batch)
    assert target16.dtype == torch.float32 and loss16.dtype == torch.float32  # returns and losses stay float32
    assert (target32 - target16).abs().max() < 1e-2
    assert abs(float(loss16) / float(loss32) - 1) < 0.02
    assert not torch.equal(target32, target16)  # the products did run in bf16


@pytest.mark.parametrize("learner_cls", [TD3SVF, EnsembleTD3SVF])
def test_bf16_updates_keep_float32_weights_state_and_the_polyak_rule(learner_cls):
    learner, batch = trained_state(learner_cls, **MID)
    hp = learner.hparams
    critic_opt, actor_opt = learner.optimizers()
    moved = 0
    for _ in range(4):
        before = [t.detach().clone() for t in learner.critic_target.parameters()]
        before_actor = [t.detach().clone() for t in learner.actor.parameters()]
        with torch.autocast(**BF16):
            learner.update(batch)
        nets = [*learner.critic.parameters(), *learner.actor.parameters(),
                *learner.critic_target.parameters(), *learner.actor_target.parameters()]
        assert all(p.dtype == torch.float32 for p in nets)
        for opt in (critic_opt, actor_opt):
            for state in opt.state.values():
                assert all(v.dtype == torch.float32 for v in state.values() if v.dim() > 0)
        if learner.critic_target_update.calls % hp.target_every == 0:
            moved += 1
            for old, new, online in zip(before, learner.critic_target.parameters(), learner.critic.parameters()):
                assert torch.equal(new, torch.lerp(old, online, hp.critic_tau))  # the float32 rule, bit for bit
            # the bootstrap actor: the actor before this update's step, moved critic_tau towards it after, in float32
            for old, new, online in zip(before_actor, learner.actor_target.parameters(), learner.actor.parameters()):
                assert torch.equal(new, torch.lerp(old, online, hp.critic_tau))
    assert moved == 2


def test_padded_and_compact_paths_give_the_same_update():
    results = []
    for paths in ("compact", "padded"):
        learner, batch = trained_state(target_noise=0.0, paths=paths, **MID)
        learner.update(batch)
        results.append([p.detach().clone() for p in learner.critic.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_deferred_finite_checks_stop_after_the_training_step(monkeypatch):
    """On an accelerator the losses are read once per training step; a NaN then names its update."""
    learner, batch = trained_state(**MID)
    monkeypatch.setattr(type(learner), "defers_checks", staticmethod(lambda device: True))
    learner.check_finite("train/loss/td", torch.tensor(0.5))
    learner.check_finite("train/loss/td", torch.tensor(math.nan))
    learner.check_finite("train/loss/actor", torch.tensor(1.0))
    with pytest.raises(NonFiniteLossError, match="after this update's step") as caught:
        learner.flush_finite_checks()
    assert caught.value.applied and caught.value.term == "train/loss/td" and caught.value.update == learner.updates
    learner.flush_finite_checks()  # nothing left to read


def test_precision_choice(monkeypatch):
    monkeypatch.setattr(precision, "bf16_units", lambda device: "AMX")
    assert precision.choose("cpu", None)[0] == "bf16-mixed"
    chosen, line = precision.choose("cpu", "32-true")
    assert chosen == "32-true" and "as --trainer.precision asks" in line
    monkeypatch.setattr(precision, "bf16_units", lambda device: None)
    chosen, line = precision.choose("auto", None)
    assert chosen == "32-true" and "no bf16 matrix units" in line and "\n" not in line
    assert precision.accelerator_type("gpu") == "cuda" and precision.accelerator_type("cpu") == "cpu"


def test_a_config_with_auto_bf16_says_which_precision_it_chose(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(precision, "bf16_units", lambda device: None)
    cli = main(["--config", str(ROOT / "conf" / "point_maze_s.yaml"), "--data.total_frames", "1040",
                "--trainer.logger", "false"], run=False)
    assert cli.trainer.precision == "32-true"
    assert "precision" not in capsys.readouterr().out  # said when the run starts, not before the config is checked
    cli.before_fit()
    assert capsys.readouterr().out.count("precision: 32-true (no bf16 matrix units") == 1


# One config per learner family; the DQN ensemble's fit is slower (marked slow).
FITS = [("point_maze_s.yaml", ()), ("three_room.yaml", ()), ("mountain_car.yaml", ("--model.init_args.backend", "torch")),
        ("point_maze_s.yaml", ("--model", "sun_lightning.learners.ensemble_td3.EnsembleTD3SVF",
                               "--data.selector", "sun_lightning.goals.ensemble.DISCOVER")),
        pytest.param("three_room.yaml", ("--model", "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF",
                                         "--data.selector", "sun_lightning.goals.ensemble.AdaGoal"), marks=pytest.mark.slow)]


@pytest.mark.parametrize(("config", "extra"), FITS)
def test_fits_in_bf16_mixed(config, extra, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Small TD3 networks: the precision path is the same, and bf16 without bf16 units is slow at the paper's sizes.
    small = ("--model.init_args.hidden=32", "--model.init_args.maxout_width=64", "--model.init_args.head_width=32",
             "--model.init_args.batch_size=32") if config == "point_maze_s.yaml" else ()
    cli = main(["fit", "--config", str(ROOT / "conf" / config), *extra, *small,
                "--data.total_frames", "320", "--data.warmup_frames", "288", "--data.num_envs", "2",
                "--metrics.log_every_frames", "160", "--metrics.verbose", "false", "--trainer.precision", "bf16-mixed",
                "--trainer.logger", "false", "--trainer.enable_checkpointing", "false"])
    assert cli.trainer.precision == "bf16-mixed" and cli.datamodule.exploration.frames == 320
    assert cli.model.updates == int(32 * cli.datamodule.config.updates_per_frame) > 0
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in cli.model.parameters())
