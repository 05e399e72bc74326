"""The TD3 update as captured graphs, one per plan: on the CPU with a stand-in that replays the step on static
buffers as a CUDA graph does (the capture itself is tested on a GPU: tests/system/test_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from sun_lightning.learners.ensemble_td3 import EnsembleTD3SVF
from sun_lightning.learners.graphs import UpdateGraphs, count_optimizer_steps, uses_graphs
from sun_lightning.learners.td3 import TD3SVF
from sun_lightning.replay.future import FutureGoalSampler
from tests.unit.learners.test_td3 import SMALL, SPACE, storage_of_walks


class StaticReplay:
    """What a captured graph does to its inputs and outputs: the batch copied into buffers fixed at the first
    call, the step run on those buffers, its outputs copied out. Counts the calls."""

    def __init__(self, step):
        self.step, self.static, self.calls = step, None, 0

    def __call__(self, batch):
        if self.static is None:
            self.static = batch.clone()
        else:
            self.static.update_(batch)
        self.calls += 1
        return self.step(self.static).clone()


class FakeLightningOptimizer:
    """An optimizer as Lightning's manual loop wraps it: its step hooks count steps."""

    def __init__(self, optimizer, counter):
        self.optimizer, self.counter = optimizer, counter
        self._on_before_step = lambda: counter.append("before")
        self._on_after_step = lambda: counter.append("after")

    def step(self):
        self._on_before_step()
        self.optimizer.step()
        self._on_after_step()

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


def learner_pair(cls=TD3SVF, space=SPACE, sizes=SMALL, **kwargs):
    """The same learner twice (same initial weights): one eager, one replaying plans through StaticReplay."""
    made = []
    for _ in range(2):
        torch.manual_seed(0)
        learner = cls(space, **sizes, **kwargs)
        steps = []
        opts = learner.configure_optimizers()
        wrapped = [FakeLightningOptimizer(o, steps) for o in (opts if isinstance(opts, list) else [opts])]
        learner.optimizers = (lambda w, single: lambda: w[0] if single else w)(wrapped, not isinstance(opts, list))
        learner.manual_backward = lambda loss, **kw: loss.backward(**kw)
        made.append((learner, steps))
    (eager, eager_steps), (graphed, graph_steps) = made
    replays = {}

    def factory(step):
        replays[len(replays)] = replay = StaticReplay(step)
        return replay

    graphed._graphs = UpdateGraphs(graphed.update_step, factory)
    return eager, graphed, replays, eager_steps, graph_steps


@pytest.mark.parametrize("cls,count", [(TD3SVF, None), (EnsembleTD3SVF, 4)])
def test_replayed_plans_take_the_eager_updates(cls, count):
    """policy_delay 3 and target_every 2 give four plans over six updates; replaying each plan's step on
    static buffers gives the eager update's weights, targets, optimizer state and statistics bit for bit."""
    eager, graphed, replays, eager_steps, graph_steps = learner_pair(cls, policy_delay=3, target_every=2)
    storage = storage_of_walks()
    sampler = FutureGoalSampler(batch_size=32, horizon=5)
    g = torch.Generator().manual_seed(1)
    batches = [sampler.sample(storage, generator=g, count=count) for _ in range(6)]
    for learner in (eager, graphed):
        torch.manual_seed(7)  # the target policy's smoothing noise
        for batch in batches:
            learner.update(batch)
    # plans (actor step, critic target moves) of updates 1..6: FF, FT, TF, FT, FF, TT
    assert [r.calls for r in replays.values()] == [2, 2, 1, 1]
    assert set(graphed._graphs.graphs) == {(False, False), (False, True), (True, False), (True, True)}
    for a, b in zip(eager.state_dict().values(), graphed.state_dict().values()):
        assert torch.equal(a, b)
    for opt_a, opt_b in zip(eager.optimizers(), graphed.optimizers()):
        for state_a, state_b in zip(opt_a.optimizer.state.values(), opt_b.optimizer.state.values()):
            assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert eager.updates == graphed.updates == 6
    assert eager.critic_target_update.calls == graphed.critic_target_update.calls == 6
    assert eager.pop_train_metrics() == graphed.pop_train_metrics()
    assert len(eager_steps) == len(graph_steps) == 2 * (6 + 2)  # six critic steps, two actor steps: Lightning counts 8


def test_a_non_finite_loss_of_a_replayed_update_names_its_update():
    """Replayed updates read their losses after the step (as CUDA defers them); the error names the update."""
    from sun_lightning.errors import NonFiniteLossError

    _, graphed, _, _, _ = learner_pair()
    graphed.defers_checks = lambda device: True
    storage = storage_of_walks()
    sampler = FutureGoalSampler(batch_size=16, horizon=5)
    graphed.update(sampler.sample(storage))
    graphed.flush_finite_checks()
    with torch.no_grad():
        next(graphed.critic.parameters()).fill_(float("nan"))
    graphed.update(sampler.sample(storage))
    with pytest.raises(NonFiniteLossError, match="update 1") as error:
        graphed.flush_finite_checks()
    assert "train/loss/td" in str(error.value)


def test_the_setting_and_what_blocks_a_capture():
    assert uses_graphs("auto", []) and not uses_graphs("auto", ["x"]) and not uses_graphs(False, [])
    assert uses_graphs(True, [])
    with pytest.raises(ValueError, match="model.init_args.cuda_graph=true, but the update cannot be captured: x; y"):
        uses_graphs(True, ["x", "y"])
    with pytest.raises(ValueError, match="model.init_args.cuda_graph must be 'auto', true or false, got 'sometimes'"):
        TD3SVF(SPACE, **SMALL, cuda_graph="sometimes")
    learner = TD3SVF(SPACE, **SMALL, compile_targets=True, paths="compact")
    blockers = learner.graph_blockers(torch.device("cpu"))
    assert blockers == ["the learner is on cpu, not a CUDA device", "compile_targets compiles with dynamic shapes",
                        "paths=compact gives the bootstraps data-dependent shapes"]
    assert learner.graph_blockers(torch.device("cuda"))[-1:] == ["paths=compact gives the bootstraps data-dependent shapes"]
    assert TD3SVF(SPACE, **SMALL).graph_blockers(torch.device("cuda")) == []  # padded on CUDA by default
    learner.configure_optimizers()
    assert learner._graphs is None  # auto, on the CPU
    with pytest.raises(ValueError, match="not a CUDA device"):
        TD3SVF(SPACE, **SMALL, cuda_graph=True).configure_optimizers()


@pytest.mark.parametrize("ensemble", [False, True])
def test_the_dqn_update_replayed_with_a_row_per_next_state_takes_the_eager_steps(ensemble, monkeypatch):
    """The captured DQN update gives every step's next state its own row (fixed shapes): on runs whose next
    states are the next rows' states, and without dropout, the eager update's weights and statistics."""
    from sun_lightning.learners.dqn import DQNSVF
    from sun_lightning.learners.ensemble_dqn import EnsembleDQNSVF
    from tests.unit.learners.test_dqn import SPACE as GRID, consistent_batch

    cls = EnsembleDQNSVF if ensemble else DQNSVF
    eager, graphed, replays, eager_steps, graph_steps = learner_pair(cls, GRID, {}, dropout=0.0, backend="torch")
    fixed = torch.tensor([2, 0, 3, 1])
    monkeypatch.setattr(EnsembleDQNSVF, "draw_target_index", lambda self, device=None: fixed)

    def batch(seed):
        if not ensemble:
            return consistent_batch(8, 16, seed)
        return torch.stack([consistent_batch(8, 16, 10 * seed + member) for member in range(4)])

    batches = [batch(seed) for seed in range(4)]
    for learner in (eager, graphed):
        for b in batches:
            learner.update(b)
    extra, every = DQNSVF._extra_steps(consistent_batch(8, 16, 0), every=True)
    assert torch.equal(every, torch.arange(8 * 16)) and extra[:, -1].all()
    assert list(graphed._graphs.graphs) == [(True,)] and replays[0].calls == 4  # the target moves every update
    for a, b in zip(eager.state_dict().values(), graphed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    eager_metrics, graph_metrics = eager.pop_train_metrics(), graphed.pop_train_metrics()
    assert eager_metrics.keys() == graph_metrics.keys()
    for name, value in eager_metrics.items():
        if name == "train/trace/continue":
            # at a step that reaches its goal the next row has the next segment's goal; its trace test is then
            # unused (the step is terminal), but counted here: the two differ at such steps only
            assert graph_metrics[name] == pytest.approx(value, abs=0.02)
            continue
        assert graph_metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert len(eager_steps) == len(graph_steps) == 2 * 4


def test_lightning_counts_the_steps_of_replayed_graphs():
    counted = []
    count_optimizer_steps([FakeLightningOptimizer(None, counted), torch.optim.SGD([torch.zeros(1)], lr=1.0)])
    assert counted == ["before", "after"]  # a bare optimizer has no hooks to call
