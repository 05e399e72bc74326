"""The loop, its recorder, its events, its checkpointed state and the order of Lightning's training steps (SPEC §9),
driven by a fake collector: no env, no Lightning trainer."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

import sun_lightning.envs  # noqa: F401  (registers the environments)
from sun_lightning import keys
from sun_lightning.envs.registry import goal_space
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.events import TOPICS, Events
from sun_lightning.exploration.handle import Exploration
from sun_lightning.exploration.loop import Budget, collect
from sun_lightning.exploration.prefetch import LEAD, TrainingSteps
from sun_lightning.exploration.recorder import record
from sun_lightning.exploration.state import exploration_state, load_exploration_state
from sun_lightning.replay.exact_count import ExactCount
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.storage import GoalReplayStorage
from tests.helpers import THREE_ROOM, one_hot

SPACE = goal_space(THREE_ROOM)


class FakeCollector:
    """Vector steps ``[B, 1]`` of tiles ``t, t + 1, …`` at step t; it logs each step with the learner's update count
    when the step was taken (the networks it acted with)."""

    def __init__(self, num_envs: int, agent: FakeAgent, log: list, goals: bool = False) -> None:
        self.num_envs, self.agent, self.log, self.goals, self.t = num_envs, agent, log, goals, 0
        self._carrier = TensorDict({keys.OBS: torch.zeros(num_envs, SPACE.obs_dim)}, batch_size=[num_envs])

    def __iter__(self):
        while True:
            self.t += 1
            self.log.append(("step", self.t, self.agent.updates))
            b = self.num_envs
            tiles = (torch.arange(b) + self.t) % SPACE.obs_dim
            obs = one_hot(tiles, SPACE.obs_dim)
            no = torch.zeros(b, 1, dtype=torch.bool)
            step = {keys.OBS: obs, keys.ACTION: tiles % SPACE.num_actions,
                    keys.NEXT: {keys.OBS: one_hot((tiles + 1) % SPACE.obs_dim, SPACE.obs_dim), keys.TERMINATED: no,
                                keys.DONE: no}}
            if self.goals:  # env 0 selects a goal on odd steps and reaches it on the next
                selected = torch.tensor([self.t % 2 == 1] + [False] * (b - 1))
                reached = torch.tensor([self.t % 2 == 0 and self.t > 0] + [False] * (b - 1))
                step.update({keys.GOAL: obs, keys.GOAL_ACTION: torch.zeros(b, dtype=torch.long),
                             keys.GOAL_SELECTED: selected, keys.GOAL_RESELECTED: torch.zeros(b, dtype=torch.bool),
                             keys.RANDOM_PHASE: torch.zeros(b, dtype=torch.bool)})
                step[keys.NEXT].update({keys.GOAL_REACHED: reached, keys.GOAL_STEPS: reached.long(),
                                        keys.GOAL_SELECTED: torch.zeros(b, dtype=torch.bool),
                                        keys.GOAL_RESELECTED: torch.zeros(b, dtype=torch.bool)})
            yield TensorDict(step, batch_size=[b]).unsqueeze(-1)


class FakeAgent:
    batches_per_update = 1

    def __init__(self) -> None:
        self.updates, self.observed = 0, 0

    def observe(self, obs: torch.Tensor) -> None:
        self.observed += len(obs)


class FakeSampler:
    steps_needed = 1

    def sample(self, storage, scale, count):
        # each batch holds the number of entries in D when it was drawn
        return TensorDict({"held": torch.full((count, 1), len(storage))}, batch_size=[count])


class FakeEnv:
    def __init__(self) -> None:
        self.state = b"env"

    def get_state(self) -> bytes:
        return self.state

    def set_state(self, state: bytes) -> None:
        self.state = state


def exploration(num_envs: int = 2, goals: bool = False, log: list | None = None) -> Exploration:
    agent, capacity = FakeAgent(), 64 * num_envs
    transform = SimpleNamespace(active=False, exploration_state=lambda: {"goals": 1},
                                load_exploration_state=lambda state: None)
    return Exploration(config=DataConfig(env_id=THREE_ROOM, num_envs=num_envs), goal_space=SPACE, agent=agent,
                       sampler=FakeSampler(),
                       replay=CountedReplay(GoalReplayStorage(SPACE, num_envs, capacity),
                                            ExactCount(SPACE.obs_dim * SPACE.num_actions, capacity, SPACE.num_actions)),
                       vector_env=FakeEnv(), transform=transform, env=None, policy=SimpleNamespace(warmup=True),
                       collector=FakeCollector(num_envs, agent, [] if log is None else log, goals))


def listen(x: Exploration, log: list) -> None:
    for topic in TOPICS:
        x.events.subscribe(topic, lambda payload, topic=topic: log.append((topic, payload if topic != "goals" else
                                                                           int(payload[keys.GOAL_SELECTED].sum()))))


# ---- the loop ------------------------------------------------------------------------------------------------------
def test_the_loop_owes_fractional_updates_per_step_and_ends_the_warm_up():
    # 2 envs, a warm-up of 4 frames, 1 update per 4 frames: the frames after the warm-up earn 0.5 updates a step.
    x, budget = exploration(), Budget(total_frames=16, warmup_frames=4, updates_per_frame=0.25, learns=True)
    returned = []
    while (item := collect(x, budget, lambda: False)) is not None:
        returned.append((x.frames, len(item), x.credit, x.policy.warmup, x.transform.active))
    # frames 4 ends the warm-up (the transform draws goals first, the policy still acts at random); 6 earns 0.5,
    # 8 the first whole update, 12 and 16 the next
    assert returned == [(8, 1, 0.0, False, True), (12, 1, 0.0, False, True), (16, 1, 0.0, False, True)]
    assert x.frames == 16 and len(x.storage) == 16 and x.agent.observed == 16 and x.window.frames == 16
    assert collect(x, budget, lambda: False) is None and x.collector.t == 8  # no step past the budget


def test_the_loop_draws_one_batch_per_update_from_d_as_it_is_after_the_step():
    x, budget = exploration(num_envs=4), Budget(total_frames=12, warmup_frames=4, updates_per_frame=0.75, learns=True)
    first = collect(x, budget, lambda: False)  # frames 8: 4 fresh frames × 0.75 = 3 updates
    assert x.frames == 8 and [int(b["held"]) for b in first] == [8, 8, 8]
    second = collect(x, budget, lambda: False)
    assert x.frames == 12 and len(second) == 3


def test_without_learning_every_step_is_one_empty_training_step_and_a_stop_ends_the_loop():
    x, budget = exploration(), Budget(total_frames=100, warmup_frames=4, updates_per_frame=1.0, learns=False)
    assert collect(x, budget, lambda: False) == [] and x.frames == 2
    assert collect(x, budget, lambda: False) == [] and x.frames == 4
    assert collect(x, budget, lambda: True) is None and x.frames == 4


# ---- the recorder and the events -----------------------------------------------------------------------------------
def test_a_step_is_recorded_into_d_and_its_counts_and_announces_its_goals_before_its_frames():
    x, log = exploration(goals=True), []
    listen(x, log)
    for rollout in (next(x.rollouts) for _ in range(3)):
        record(x, rollout[..., 0])
    # a goal selected (odd steps) or reached (even ones) on every step: each step's goals, then its frames
    assert log == [("goals", 1), ("frames", 2), ("goals", 0), ("frames", 4), ("goals", 1), ("frames", 6)]
    assert len(x.storage) == 6 and x.window.selected == 2 and x.window.reached == 1
    tiles = torch.tensor([1, 2, 2, 3, 3, 4])  # steps t = 1, 2, 3 of two envs: tiles t and t + 1
    actions = tiles % SPACE.num_actions
    assert torch.equal(x.pseudocount.counts(torch.arange(6)), torch.tensor([1, 2, 2, 2, 2, 1]).to(
        x.pseudocount.counts(torch.arange(6)).dtype)), (tiles, actions)


def test_goals_are_announced_only_where_someone_listens_and_an_env_selected_or_reached_one():
    x, log = exploration(goals=False), []
    listen(x, log)
    record(x, next(x.rollouts)[..., 0])
    assert log == [("frames", 2)]  # a step without goals (Random, the warm-up) announces its frames only


def test_events_call_their_listeners_in_order_once_and_refuse_an_unknown_topic():
    events, heard = Events(), []
    first, second = (lambda n: heard.append(("first", n))), (lambda n: heard.append(("second", n)))
    events.subscribe("frames", first)
    events.subscribe("frames", second)
    events.subscribe("frames", first)  # once
    assert events.heard("frames") and not events.heard("goals")
    events.emit("frames", 4)
    events.unsubscribe("frames", first)
    events.unsubscribe("frames", first)  # not there: nothing happens
    events.emit("frames", 8)
    assert heard == [("first", 4), ("second", 4), ("second", 8)]
    with pytest.raises(ValueError, match="unknown event topic 'frame'"):
        events.subscribe("frame", first)


# ---- Lightning's training steps --------------------------------------------------------------------------------------
class FakeTrainer:
    should_stop, received_sigterm, max_steps, global_step = False, False, -1, 0


def lightning_fit(steps: TrainingSteps, agent: FakeAgent, log: list, trainer: FakeTrainer | None = None) -> list:
    """Lightning's training loop as it calls the loop: the loader's items fetched one ahead, each training step's
    start, update and end; returns the items trained, in order."""
    trainer = trainer or FakeTrainer()
    items, trained = iter(steps.items()), []
    ahead = next(items, None)  # Lightning's prefetch before the first step
    while ahead is not None and not trainer.should_stop:
        item, ahead = ahead, next(items, None)
        steps.on_train_batch_start(trainer, None, item, len(trained))
        for batch in item:  # the learner's updates
            agent.updates += 1
            log.append(("update", int(batch["held"])))
        trained.append(item)
        steps.on_train_batch_end(trainer, None, None, item, len(trained) - 1)
    return trained


def test_the_events_of_a_step_fire_after_the_update_of_a_training_step_never_inside_the_fetch():
    log = []
    x = exploration(log=log)
    listen(x, log)
    steps = TrainingSteps(x, Budget(total_frames=10, warmup_frames=4, updates_per_frame=0.5, learns=True))
    items = steps.items()
    assert [next(items) for _ in range(LEAD)] == [[], []]  # fetching steps no env and announces nothing
    assert log == [] and x.frames == 0

    log.clear()
    x = exploration(log=log)
    listen(x, log)
    steps = TrainingSteps(x, Budget(total_frames=10, warmup_frames=4, updates_per_frame=0.5, learns=True))
    trained = lightning_fit(steps, x.agent, log)
    assert [len(item) for item in trained] == [0, 0, 1, 1, 1]  # two placeholders, then frames 6, 8 and 10's update
    # Every training step ends with ``trained`` (but a placeholder's, which trained nothing); the env steps after it,
    # with each step's frames. A step acts with the networks of two training steps before (the update counts logged
    # with it), and its batch is trained two training steps later (the entries D held when it was drawn).
    assert log == [("step", 1, 0), ("frames", 2), ("step", 2, 0), ("frames", 4), ("step", 3, 0), ("frames", 6),
                   ("step", 4, 0), ("frames", 8),
                   ("update", 6), ("trained", 8),
                   ("step", 5, 1), ("frames", 10),
                   ("update", 8), ("trained", 10),
                   ("update", 10), ("trained", 10)]
    assert not x.untrained


def test_a_checkpoint_after_an_update_holds_the_next_item_and_a_resumed_session_collects_before_training_it():
    budget = Budget(total_frames=12, warmup_frames=4, updates_per_frame=0.5, learns=True)
    whole_log = []
    whole = exploration(log=whole_log)
    lightning_fit(TrainingSteps(whole, budget), whole.agent, whole_log)

    log = []
    x = exploration(log=log)
    trainer, saved = FakeTrainer(), {}

    def checkpoint(frames: int) -> None:  # written on ``trained``, as FrameCheckpoint does; then the run is killed
        if frames == 8 and not saved:
            saved.update(exploration_state(x), updates=x.agent.updates, t=x.collector.t)
            trainer.should_stop = True

    x.events.subscribe("trained", checkpoint)
    lightning_fit(TrainingSteps(x, budget), x.agent, log, trainer)
    assert saved["frames"] == 8 and [len(item) for item in saved["untrained"]] == [1]  # frames 8's batch, fetched

    resumed_log = []
    resumed = exploration(log=resumed_log)
    load_exploration_state(resumed, saved)
    resumed.agent.updates, resumed.collector.t = saved["updates"], saved["t"]
    trained = lightning_fit(TrainingSteps(resumed, budget), resumed.agent, resumed_log)
    assert [len(item) for item in trained] == [0, 1, 1, 1]  # one placeholder, the saved item, then frames 10 and 12's
    cut = len([entry for entry in log if entry[0] != "trained"])
    assert [e for e in resumed_log if e[0] != "trained"] == [e for e in whole_log if e[0] != "trained"][cut:]
    assert resumed.frames == whole.frames == 12 and torch.equal(resumed.storage.columns[keys.OBS],
                                                                whole.storage.columns[keys.OBS])


def test_the_loop_stops_where_lightning_will_not_ask_for_another_batch():
    x = exploration()
    steps = TrainingSteps(x, Budget(total_frames=100, warmup_frames=4, updates_per_frame=1.0, learns=True))
    trainer = FakeTrainer()
    trainer.max_steps, trainer.global_step = 3, 3
    steps.on_train_batch_end(trainer, None, None, [], 0)
    assert x.frames == 0  # max_steps reached: Lightning stops after this step
    trainer.max_steps, trainer.received_sigterm = -1, True
    steps.on_train_batch_end(trainer, None, None, [], 0)
    assert x.frames == 0


# ---- the checkpointed state ----------------------------------------------------------------------------------------
def test_the_exploration_state_round_trips_into_a_fresh_run():
    x, budget = exploration(goals=True), Budget(total_frames=100, warmup_frames=4, updates_per_frame=0.25, learns=True)
    x.untrained.append(collect(x, budget, lambda: False))
    x.untrained.append([])
    x.vector_env.state = b"after"
    random.seed(5)
    state = exploration_state(x)
    drawn = random.random()

    fresh = exploration(goals=True)
    load_exploration_state(fresh, state)
    assert (fresh.frames, fresh.credit, fresh.policy.warmup) == (x.frames, x.credit, False) == (8, 0.0, False)
    assert fresh.vector_env.state == b"after" and fresh.window.selected == x.window.selected == 2
    assert torch.equal(fresh.storage.columns[keys.OBS], x.storage.columns[keys.OBS])
    assert torch.equal(fresh.pseudocount.counts(torch.arange(8)), x.pseudocount.counts(torch.arange(8)))
    assert [len(item) for item in fresh.untrained] == [1, 0]
    assert torch.equal(fresh.untrained[0][0]["held"], x.untrained[0][0]["held"])
    assert fresh.pending_rng is not None
    next(iter(TrainingSteps(fresh, budget).items()))  # the loop resumes: the RNGs are those of the checkpoint
    assert random.random() == drawn


def test_a_checkpoint_of_another_number_of_processes_is_refused():
    x = exploration()
    state = exploration_state(x)
    state["world_size"] = 2
    with pytest.raises(ValueError, match="resume with --trainer.devices 2"):
        load_exploration_state(exploration(), state)
