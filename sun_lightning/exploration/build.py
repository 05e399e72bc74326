"""Building one run's exploration (SPEC §9): the replay storage D and its counts, the vector env with the goal
selection transform, the learner's acting policy and the TorchRL collector, in one :class:`Exploration` handle."""

from __future__ import annotations

import gymnasium
import torch
from gymnasium.vector import AutoresetMode
from torchrl.collectors import Collector
from torchrl.envs import GymWrapper, TransformedEnv

from sun_lightning.envs.custom import CustomEnv
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.errors import ConfigError
from sun_lightning.exploration.agent import Agent
from sun_lightning.exploration.config import DataConfig
from sun_lightning.exploration.distributed import seed_rank
from sun_lightning.exploration.events import Events
from sun_lightning.exploration.handle import Exploration
from sun_lightning.goals.transform import GoalSelectionTransform
from sun_lightning.replay.binned_count import BinnedCount
from sun_lightning.replay.counted import CountedReplay
from sun_lightning.replay.counts import Pseudocount
from sun_lightning.replay.exact_count import ExactCount
from sun_lightning.replay.pseudocount import make_radius_pseudocount
from sun_lightning.replay.storage import GoalReplayStorage


def build(config: DataConfig, *, goal_space: GoalSpace, custom: CustomEnv | None, agent: Agent, rank: int = 0,
          world_size: int = 1, gather_device: torch.device | None = None, events: Events | None = None,
          device: torch.device = torch.device("cpu")) -> Exploration:
    """Everything one process explores with: the run's ``data`` config (checked by :class:`DataConfig` and the
    DataModule) and what the trainer gives or derives from it (the goal space, the learner, this process's place).

    Under DDP D and its pseudocounts hold every rank's envs (:mod:`sun_lightning.exploration.distributed`): the
    storage interleaves ``world_size × num_envs`` streams, rank r's envs at columns ``r·num_envs`` onwards.
    """
    num_envs = config.num_envs  # this process's
    sampler = agent.make_sampler()
    streams = num_envs * world_size
    needed = sampler.steps_needed * streams
    if config.warmup_frames < needed:
        raise ConfigError(f"data.warmup_frames ({config.warmup_frames}) must cover the {needed // streams} steps "
                          f"of each of {streams} envs that the learner's first batch needs")
    capacity = config.capacity or config.total_frames + streams
    if capacity < needed:
        raise ConfigError(f"data.capacity ({capacity}) must hold the {needed // streams} steps per env of a batch")
    capacity += -capacity % streams
    storage_at = torch.device(config.storage_device) if config.storage_device else device
    replay = CountedReplay(GoalReplayStorage(goal_space, streams, capacity, storage_at),
                           build_pseudocount(goal_space, capacity, config.sigma_every, storage_at, config.backend,
                                             config.counts, config.rho))
    run_seed = config.seed if config.seed is not None else torch.initial_seed() % 2**31
    if world_size > 1:
        # Every rank explores with its own envs and random streams (Lightning seeded all ranks alike).
        seed_rank(run_seed, rank)
    env_seed = run_seed + rank
    # Explicit resets: TorchRL resets ended envs itself (partial resets), so it reads no
    # terminal observations out of the info dict on every step as SAME_STEP autoreset needs.
    if custom is not None:
        vec = custom.make_vec(num_envs, AutoresetMode.DISABLED)
    else:
        vec = gymnasium.make_vec(config.env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                                 autoreset_mode=AutoresetMode.DISABLED)
    base = GymWrapper(vec, categorical_action_encoding=True)
    base.set_seed(env_seed)
    transform = GoalSelectionTransform(config.selector, replay, agent, num_envs, horizon(vec, custom))
    env = TransformedEnv(base, transform)
    policy = agent.make_policy(config.selector.uses_goals)
    # The acting policies read goals and observations only, no episode-start flag: TorchRL's InitTracker
    # (which it offers to append) would add a key to every step for nothing.
    collector = Collector(env, policy, frames_per_batch=num_envs, total_frames=-1, track_traj_ids=False,
                          auto_register_policy_transforms=False)
    return Exploration(config=config, goal_space=goal_space, agent=agent, sampler=sampler, replay=replay,
                       vector_env=vec, transform=transform, env=env, policy=policy, collector=collector, custom=custom, rank=rank,
                       world_size=world_size, gather_device=gather_device, run_seed=run_seed, env_seed=env_seed,
                       events=events if events is not None else Events())


def build_pseudocount(space: GoalSpace, capacity: int, sigma_every: int, device: torch.device, backend: str = "auto",
                      counts: str = "pseudo", rho: float | None = None) -> Pseudocount:
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


def horizon(vec, custom: CustomEnv | None) -> int | None:
    """The episode horizon of a vector env's sub-envs (its spec's ``max_episode_steps``; a user's env: its
    registration's), ``None`` if it has none."""
    spec = getattr(vec, "spec", None)
    if custom is not None:
        spec = gymnasium.spec(custom.gym_id)
    return getattr(spec, "max_episode_steps", None) or None
