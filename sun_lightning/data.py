"""Data collection: environments, collector, replay storage and the stream of learning batches (SPEC §9).

Everything that touches environments lives here and is built in ``setup()``,
so checkpoints, DDP and ``--print_config`` never see it. One vector step, as
data flows::

    gymnasium vector env → TorchRL env + GoalSelectionTransform (goal per env, SPEC §3)
      → the learner's acting policy → Collector
      → replay storage D (+ pseudocount update of the new entries, SPEC §4)
      → the learner's sampler → one relabelled batch per learner update

The "dataset" is a stream that steps the collector and yields the learning
batches of each vector step, never a DataLoader re-batching single transitions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Literal

import gymnasium
import lightning.pytorch as pl
import torch
from gymnasium.vector import AutoresetMode
from jsonargparse import lazy_instance
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import DataLoader, IterableDataset
from torchrl.collectors import Collector
from torchrl.envs import GymWrapper, TransformedEnv

import sun_lightning.envs  # noqa: F401  (registers the environments)
from sun_lightning import keys
from sun_lightning.distributed import all_gather, gather_step, seed_rank
from sun_lightning.envs.custom import GoalConfig, custom_env
from sun_lightning.domains import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, check_arguments
from sun_lightning.envs.gridworlds import register_layout
from sun_lightning.envs.registry import GoalSpace, goal_space
from sun_lightning.errors import ConfigError
from sun_lightning.goals.base import GoalSelector
from sun_lightning.goals.sun import SUNAdaptive
from sun_lightning.goals.transform import GoalSelectionTransform
from sun_lightning.learners.base import Learner
from sun_lightning.replay.binned_count import BinnedCount
from sun_lightning.replay.exact_count import ExactCount
from sun_lightning.replay.pseudocount import BACKENDS, make_radius_pseudocount
from sun_lightning.replay.storage import GoalReplayStorage
from sun_lightning.resume import exploration_state, load_exploration_state, set_rng_state


class ExplorationDataModule(pl.LightningDataModule):
    """Environments, collector and replay storage of one exploration run.

    Args:
        env_id: a registered id, e.g. ``sun_lightning/FourRoomStuck-v0``; with ``layout``, the id its gridworld
            gets (``sun_lightning/<Name>-v0``, not a built-in's).
        total_frames: env frames of the run (all envs of all processes together), warm-up included.
        num_envs: envs stepped together in one in-process vector env (per process under DDP).
        warmup_frames: frames of uniformly random actions before learning (SPEC §5d).
        capacity: replay entries kept (FIFO eviction beyond); ``None`` keeps everything.
        selector: the goal-selection rule (SPEC §3).
        updates_per_frame: learner updates per env frame (1 in the paper).
        sigma_every: inserts between re-standardizations of the radius pseudocount (SPEC §4).
        backend: the radius pseudocount's index: ``native`` (a C hash grid, built with the system
            C compiler), ``torch`` (brute force on the storage's device), or ``auto`` (native on
            CPU where it builds, torch otherwise, with a one-line warning).
        storage_device: where D and its pseudocounts live; ``None``: the learner's device.
        seed: environment seed; ``None`` derives it from ``seed_everything``.
        counts: what a goal's novelty counts: ``pseudo`` (the radius pseudocount of SPEC §4; exact (tile, action)
            counts on gridworlds) or ``binned`` (the paper's "true counts" ablation: exact counts of 50 bins per goal
            dimension over the metric bounds, per (bin, action) where actions are part of the goal,
            :class:`~sun_lightning.replay.binned_count.BinnedCount`; gridworlds keep their exact counts).
        rho: the pseudocount radius ρ, overriding the environment's (SPEC §4; the paper's ρ ablation); the reach
            rule keeps the environment's. ``None``: the environment's.
        layout: a gridworld's map in SPEC §6's symbols (``W`` wall, ``.`` free, ``Q`` random move, ``S`` start,
            ``G`` terminal, one line per row, tiles separated by spaces), checked and registered under ``env_id``
            (:func:`~sun_lightning.envs.gridworlds.parse_layout`: 4 actions, horizon 200, ``G`` ends an episode
            on entry); ``None``: ``env_id`` is an environment of the package.
        goal: the goal space of ``env_id`` as any id :func:`gymnasium.make` knows (
            :class:`~sun_lightning.envs.custom.GoalConfig`, docs/custom-envs.md); ``None``: a registered id.
        env_package: a module imported first (your package's ``gymnasium.register`` calls).
        vector: with ``goal``, gymnasium's ``sync`` (in-process) or ``async`` (a process per env) vector env.
    """

    def __init__(
        self,
        env_id: str,
        total_frames: PositiveInt = 100_000,
        num_envs: PositiveInt = 4,
        warmup_frames: NonNegativeInt = 10_000,
        capacity: PositiveInt | None = None,
        selector: GoalSelector = lazy_instance(SUNAdaptive),
        updates_per_frame: NonNegativeFloat = 1.0,
        sigma_every: PositiveInt = 1000,
        backend: Literal["auto", "native", "torch"] = "auto",
        storage_device: str | None = None,
        seed: int | None = None,
        layout: str | None = None,
        counts: Literal["pseudo", "binned"] = "pseudo",
        rho: PositiveFloat | None = None,
        goal: GoalConfig | None = None,
        env_package: str | None = None,
        vector: Literal["sync", "async"] = "sync",
    ) -> None:
        super().__init__()
        self.custom = custom_env(env_id, goal, env_package, vector)  # checked, its goal space recorded
        check_arguments(ExplorationDataModule, locals(), "data.")  # the annotated domains
        if layout is not None:
            register_layout(env_id, layout)  # a map that cannot work fails here, naming the problem
        self.goal_space = goal_space(env_id)  # fails fast on an unknown id
        if counts not in COUNTS:
            raise ConfigError(f"data.counts must be one of {', '.join(COUNTS)}, got {counts!r}")
        if backend not in BACKENDS:
            raise ConfigError(f"data.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if selector.learns and updates_per_frame > 0 and total_frames <= warmup_frames:
            raise ConfigError(f"data.total_frames ({total_frames}) must exceed data.warmup_frames ({warmup_frames}): "
                              "learning starts after the warm-up, so this run would learn nothing (raise "
                              "total_frames or lower warmup_frames)")
        self.env_id, self.total_frames, self.num_envs = env_id, total_frames, num_envs
        self.warmup_frames, self.capacity, self.selector = warmup_frames, capacity, selector
        self.updates_per_frame, self.sigma_every, self.seed = updates_per_frame, sigma_every, seed
        self.backend, self.storage_device, self.layout = backend, storage_device, layout
        self.counts, self.rho = counts, rho
        self.frames = 0  # env frames of the whole job (every rank's under DDP)
        self.rank, self.world_size = 0, 1  # set in setup (DDP)
        self.credit = 0.0  # fractional updates owed (updates_per_frame < 1 spreads them over steps)
        self.pending_rng: dict | None = None  # a checkpoint's RNG states, applied when the stream resumes
        # Batches yielded but not trained on yet: Lightning's loader prefetches one, so a checkpoint
        # written after an update already holds the next vector step; its batch is saved with it.
        self.untrained: deque[list[TensorDict]] = deque()
        self.frame_listeners: list[Callable[[int], None]] = []
        #: Called with the step's goals (``GOAL_VIEW`` keys, each ``[B]``) on every vector step where an env
        #: selected or reached a goal, before the frame listeners; see also ``on_goal_selected``.
        self.goal_listeners: list[Callable[[dict[str, torch.Tensor]], None]] = []
        self.window = CollectionStats()

    # ---- construction -----------------------------------------------------------------
    def setup(self, stage: str) -> None:
        # Lightning callbacks that define ``on_goal_selected(trainer, pl_module, goals)`` hear the goal listeners.
        hooked = any(hasattr(callback, "on_goal_selected") for callback in getattr(self.trainer, "callbacks", ()))
        if hooked and self._goals_to_callbacks not in self.goal_listeners:
            self.goal_listeners.append(self._goals_to_callbacks)
        if getattr(self, "collector", None) is not None:
            return
        learner: Learner = self.trainer.lightning_module
        self.learner, space = learner, self.goal_space
        self.sampler = learner.make_sampler()
        # Under DDP D and its pseudocounts hold every rank's envs (sun_lightning.distributed): the
        # storage interleaves world_size × num_envs streams, rank r's envs at columns r·num_envs onwards.
        self.rank, self.world_size = self.trainer.global_rank, self.trainer.world_size
        streams = self.num_envs * self.world_size
        needed = self.sampler.steps_needed * streams
        if self.warmup_frames < needed:
            raise ConfigError(f"data.warmup_frames ({self.warmup_frames}) must cover the {needed // streams} steps "
                             f"of each of {streams} envs that the learner's first batch needs")
        capacity = self.capacity or self.total_frames + streams
        if capacity < needed:
            raise ConfigError(f"data.capacity ({capacity}) must hold the {needed // streams} steps per env of a batch")
        capacity += -capacity % streams
        device = torch.device(self.storage_device) if self.storage_device else learner.device
        self.storage = GoalReplayStorage(space, streams, capacity, device)
        self.pseudocount = build_pseudocount(space, capacity, self.sigma_every, device, self.backend, self.counts,
                                             self.rho)
        seed = self.seed if self.seed is not None else torch.initial_seed() % 2**31
        self.run_seed = seed
        if self.world_size > 1:
            # Every rank explores with its own envs and random streams (Lightning seeded all ranks alike).
            seed_rank(seed, self.rank)
        seed += self.rank
        self.env_seed = seed
        # Explicit resets: TorchRL resets ended envs itself (partial resets), so it reads no
        # terminal observations out of the info dict on every step as SAME_STEP autoreset needs.
        if self.custom is not None:
            vec = self.custom.make_vec(self.num_envs, AutoresetMode.DISABLED)
        else:
            vec = gymnasium.make_vec(self.env_id, num_envs=self.num_envs, vectorization_mode="vector_entry_point",
                                     autoreset_mode=AutoresetMode.DISABLED)
        self.vector_env = vec
        base = GymWrapper(vec, categorical_action_encoding=True)
        base.set_seed(seed)
        self.transform = GoalSelectionTransform(self.selector, self.storage, self.pseudocount, learner, self.num_envs,
                                                _horizon(vec, self.custom))
        self.env = TransformedEnv(base, self.transform)
        self.policy = learner.make_policy(self.selector.uses_goals)
        # The acting policies read goals and observations only, no episode-start flag: TorchRL's InitTracker
        # (which it offers to append) would add a key to every step for nothing.
        self.collector = Collector(self.env, self.policy, frames_per_batch=self.num_envs, total_frames=-1,
                                   track_traj_ids=False, auto_register_policy_transforms=False)
        self._rollouts = iter(self.collector)

    def teardown(self, stage: str) -> None:
        collector = getattr(self, "collector", None)
        if collector is not None:
            collector.shutdown()
            self.collector = None

    def transfer_batch_to_device(self, batch: list[TensorDict], device: torch.device, dataloader_idx: int) -> list[TensorDict]:
        """Move the learning batches to the learner's device, unless they are there already (D lives there).

        Lightning calls this right before the training step of ``batch``: from here on it is trained."""
        if self.untrained and self.untrained[0] is batch:
            self.untrained.popleft()
        if all(td.device == device for td in batch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def train_dataloader(self) -> DataLoader:
        # Batches are whole TensorDicts already: no re-batching, no conversion.
        return DataLoader(_Stream(self), batch_size=None, num_workers=0, collate_fn=_identity)

    # ---- the loop -----------------------------------------------------------------------
    def stream(self) -> Iterator[list[TensorDict]]:
        """Step the collector until ``total_frames``, yielding the learning batches of each vector step (one per update)."""
        if self.pending_rng is not None:  # resuming from a checkpoint (see sun_lightning.resume)
            set_rng_state(self.pending_rng)
            self.pending_rng = None
        # A resumed run first trains on what its checkpoint had collected (they leave the queue when trained).
        yield from list(self.untrained)
        learns = self.selector.learns and self.updates_per_frame > 0
        # The run ends at total_frames, whatever Lightning's epoch count (a resumed run may have restored a
        # finished epoch; then it continues in the next one until the new total_frames).
        while self.frames < self.total_frames and not (self.trainer is not None and self.trainer.should_stop):
            rollout = next(self._rollouts)  # [B, 1]: one vector step
            self.record(rollout[..., 0])
            if self.frames >= self.warmup_frames:
                # One more step of random actions lets the transform draw goals first. (Set only on
                # change: both are nn.Modules, whose attribute assignment walks their dicts.)
                warmup = not self.transform.active
                if self.policy.warmup != warmup:
                    self.policy.warmup = warmup
                if warmup:
                    self.transform.active = True
                if learns:
                    # One update per frame collected after the warm-up; under DDP each rank's updates are for its
                    # own envs' frames (a DDP update averages one batch per rank: as many samples per frame).
                    fresh = min(self.num_envs * self.world_size, self.frames - self.warmup_frames) / self.world_size
                    self.credit += fresh * self.updates_per_frame
                    updates = int(self.credit)
                    self.credit -= updates
                    if updates:
                        # One item per vector step (a Lightning training step): its updates
                        # share Lightning's per-step overhead and one draw of their batches.
                        batches = self._learning_batches(updates)
                        self.untrained.append(batches)
                        yield batches
            if not learns:
                # No updates (Random): an empty training step per vector step still runs Lightning's batch-end
                # hooks, so checkpoints are written on their period and at the end, and the run resumes.
                yield []
        if self.trainer is not None:
            self.trainer.should_stop = True

    def record(self, step: TensorDictBase) -> None:
        """Write one collected vector step ``[B]`` into D, count its entries' pseudocounts (SPEC §4), feed the
        learner's running statistics, the window's goal statistics and the goal listeners, and count its frames."""
        flat = _flat_step(step)
        if self.world_size > 1:  # every rank's step, in rank order: one D and one pseudocount for the job
            flat = gather_step(flat, all_gather, self.trainer.strategy.root_device)
        index = self.storage.extend(flat)
        action = flat[keys.ACTION] if self.goal_space.discrete else None
        self.pseudocount.insert(index, self.goal_space.project(flat[keys.OBS]).to(self.storage.device),
                                None if action is None else action.to(self.storage.device))
        self.learner.observe(flat[keys.OBS])
        self.window.update(flat)
        if self.goal_listeners and keys.GOAL_SELECTED in flat:
            # Before the frame listeners, so that what they report at a frame count includes this step's goals.
            if bool((flat[keys.GOAL_SELECTED] | flat[keys.GOAL_REACHED]).any()):
                goals = {name: flat[name] for name in GOAL_VIEW}
                for listener in self.goal_listeners:
                    listener(goals)
        self.frames += len(flat[keys.EPISODE_END])
        for listener in self.frame_listeners:
            listener(self.frames)

    def _goals_to_callbacks(self, goals: dict[str, torch.Tensor]) -> None:
        for callback in self.trainer.callbacks:
            hook = getattr(callback, "on_goal_selected", None)
            if hook is not None:
                hook(self.trainer, self.trainer.lightning_module, goals)

    def state_dict(self) -> dict:
        """The exploration state a checkpoint holds (:mod:`sun_lightning.resume`); empty before ``setup``."""
        return exploration_state(self) if getattr(self, "collector", None) is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict:
            load_exploration_state(self, state_dict)

    def scale(self) -> torch.Tensor | None:
        """The radius pseudocount's goal standardization σ̃ (``None`` for exact counts)."""
        scale = getattr(self.pseudocount, "scale", None)
        return None if scale is None else scale().to(self.storage.device)

    def _learning_batches(self, updates: int) -> list[TensorDict]:
        """The batches of ``updates`` updates, drawn at once; ensembles get one independent batch per member, stacked ``[E]``."""
        members = self.learner.batches_per_update
        batches = self.sampler.sample(self.storage, self.scale(), count=updates * members)
        if members > 1:
            batches = batches.unflatten(0, (updates, members))
        return list(batches.unbind(0))


def build_pseudocount(space: GoalSpace, capacity: int, sigma_every: int, device: torch.device, backend: str = "auto",
                      counts: str = "pseudo", rho: float | None = None):
    """The pseudocount of D's entries (SPEC §4): exact (tile, action) counts on gridworlds; elsewhere the radius
    pseudocount (ρ, unless ``rho`` overrides it, and the goal action from the environment's goal space) or, with
    ``counts="binned"``, the true counts of the metric's 50-bin cells (the paper's ablation)."""
    if space.exact_counts:
        return ExactCount(space.obs_dim * space.num_actions, capacity, space.num_actions, device)
    if counts == "binned":
        return BinnedCount(space.metric_low or space.low, space.metric_high or space.high, capacity,
                           space.num_actions, sigma_every, device=device)
    return make_radius_pseudocount(space.goal_dim, space.rho if rho is None else rho, capacity, space.num_actions,
                                   sigma_every, device, backend)


#: The values of ``data.counts``.
COUNTS = ("pseudo", "binned")


class _Stream(IterableDataset):
    def __init__(self, datamodule: ExplorationDataModule) -> None:
        self.datamodule = datamodule

    def __iter__(self) -> Iterator[list[TensorDict]]:
        return self.datamodule.stream()


def _identity(batch: list[TensorDict]) -> list[TensorDict]:
    return batch


NEXT_SELECTED, NEXT_RESELECTED = (keys.NEXT, keys.GOAL_SELECTED), (keys.NEXT, keys.GOAL_RESELECTED)

#: What the loop reads of a collected vector step: the replay storage's entries (``STORED_KEYS``), then
#: the goal transform's bookkeeping (absent for learners without goals).
_STEP_KEYS = {keys.OBS: keys.OBS, keys.ACTION: keys.ACTION, keys.NEXT_OBS: keys.NEXT_OBS,
              keys.TERMINATED: (keys.NEXT, keys.TERMINATED), keys.EPISODE_END: (keys.NEXT, keys.DONE)}
_GOAL_KEYS = {keys.GOAL: keys.GOAL, keys.GOAL_ACTION: keys.GOAL_ACTION,
              keys.GOAL_SELECTED: keys.GOAL_SELECTED, keys.GOAL_RESELECTED: keys.GOAL_RESELECTED,
              keys.RANDOM_PHASE: keys.RANDOM_PHASE, keys.GOAL_REACHED: (keys.NEXT, keys.GOAL_REACHED),
              keys.GOAL_STEPS: (keys.NEXT, keys.GOAL_STEPS),
              # the goal of the state the step led to: newly drawn there (by the rule, not at an episode start)
              NEXT_SELECTED: (keys.NEXT, keys.GOAL_SELECTED), NEXT_RESELECTED: (keys.NEXT, keys.GOAL_RESELECTED)}

#: What goal listeners get, each ``[B]`` (one row per env): ``goal`` ``[B, goal_dim]`` and ``goal_action`` (the goal
#: pursued from this step's state), ``goal_selected`` (drawn at this state), ``goal_reselected`` (drawn other than at
#: an episode start) and ``goal_reached`` (this step reached the row's ``goal``).
GOAL_VIEW = (keys.GOAL, keys.GOAL_ACTION, keys.GOAL_SELECTED, keys.GOAL_RESELECTED, keys.GOAL_REACHED)


def _flat_step(step: TensorDictBase) -> dict[str, torch.Tensor]:
    """The keys the loop reads of one collected vector step ``[B]``, each ``[B, ...]`` (a plain dict: the
    storage copies what it keeps at once, and a TensorDict's checks would be spent for nothing)."""
    out = {name: step.get(key) for name, key in _STEP_KEYS.items()}
    if keys.GOAL_SELECTED in step.keys():
        out.update((name, step.get(key)) for name, key in _GOAL_KEYS.items())
    out[keys.TERMINATED], out[keys.EPISODE_END] = out[keys.TERMINATED].reshape(-1), out[keys.EPISODE_END].reshape(-1)
    return out


class CollectionStats:
    """Goal statistics of a logging window, counted from the collected frames (SPEC §7).

    Goal success counts every goal once, in the window where it ends: when it is reached, replaced by another
    goal, or its episode ends with it unreached. ``live`` (per env, across windows and checkpointed with them)
    marks the envs pursuing a goal that has not ended yet, so a goal selected in one window and reached in the
    next is in the next one's numerator and denominator alike, and the rate lies in [0, 1] for every rule.
    """

    def __init__(self) -> None:
        self.live: torch.Tensor | None = None  # [B] bool: the env's goal has not ended yet
        self.reset()

    def reset(self) -> None:
        self.frames = self.episodes = self.selected = self.reselected = self.reached = 0
        self.steps_to_goal = self.random_frames = 0
        self.ended = self.ended_reached = 0  # goals that ended in the window, and those of them reached
        self.rule_fired = self.held_unmoved = 0

    def update(self, step: dict[str, torch.Tensor]) -> None:
        """Count one vector step (``_flat_step``'s keys)."""
        self.frames += step[keys.EPISODE_END].numel()
        if keys.GOAL_SELECTED not in step:
            self.episodes += int(step[keys.EPISODE_END].sum())
            return
        reached, selected, end = step[keys.GOAL_REACHED], step[keys.GOAL_SELECTED], step[keys.EPISODE_END]
        live = self.live if self.live is not None and self.live.shape == selected.shape else torch.zeros_like(selected)
        # A goal selected at this state replaces a live one (reached goals are no longer live); a live goal then
        # ends if this step reaches it or ends its episode.
        replaced = selected & live
        live = live | selected
        finished = live & (reached | end)
        self.live = live & ~finished
        rows = [end, selected, step[keys.GOAL_RESELECTED], reached, step[keys.RANDOM_PHASE], replaced, finished,
                finished & reached, torch.where(reached, step[keys.GOAL_STEPS], 0)]
        if NEXT_SELECTED in step:
            # The rule replaced a goal not reached (SUN adaptive: V(s_t, g_t) < V(s_sel, g_t)); or the env kept
            # pursuing its goal through a step that left its state as it was (pinned against a wall, say).
            unmoved = (step[keys.NEXT_OBS] == step[keys.OBS]).flatten(1).all(1)
            rows += [step[NEXT_RESELECTED] & ~reached, live & ~reached & ~step[NEXT_SELECTED] & unmoved]
        # one sum and one read for all counts (each read of a tensor waits for it); an env may end two goals in one
        # step (one replaced, then its replacement reached at once)
        counts = torch.stack([row.long() for row in rows]).sum(1).tolist()
        (episodes, selected, reselected, hits, random_frames, replaced, finished, ended_reached,
         steps_to_goal) = counts[:9]
        self.episodes += episodes
        self.selected += selected
        self.reselected += reselected
        self.reached += hits
        self.random_frames += random_frames
        self.ended += replaced + finished
        self.ended_reached += ended_reached
        self.steps_to_goal += steps_to_goal
        if len(counts) > 9:
            self.rule_fired += counts[9]
            self.held_unmoved += counts[10]

    def pop(self) -> dict[str, float]:
        """Window metrics (``explore/goals/...``), then start a new window."""
        frames = max(self.frames, 1)
        out = {
            "explore/goals/selected": float(self.selected),
            "explore/goals/reached": float(self.reached),
            "explore/goals/ended": float(self.ended),
            "explore/goals/success": self.ended_reached / self.ended if self.ended else 0.0,
            "explore/goals/steps_to_goal": self.steps_to_goal / self.reached if self.reached else 0.0,
            "explore/goals/reselection_rate": self.reselected / frames,
            "explore/goals/random_fraction": self.random_frames / frames,
            "explore/goals/rule_fired": self.rule_fired / frames,
            "explore/goals/held_unmoved": self.held_unmoved / frames,
            "explore/episodes/count": float(self.episodes),
        }
        self.reset()
        return out


def _horizon(vec, custom) -> int | None:
    """The episode horizon of a vector env's sub-envs (its spec's ``max_episode_steps``; a user's env: its
    registration's), ``None`` if it has none."""
    spec = getattr(vec, "spec", None)
    if custom is not None:
        spec = gymnasium.spec(custom.gym_id)
    return getattr(spec, "max_episode_steps", None) or None
