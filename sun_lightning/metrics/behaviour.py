"""What the agent's episodes did, from D: how far each got in the goal space, how many of its steps went nowhere,
and how saturated its actions are.

Coverage says where D has been; these say why it has not been further, the signals of a diagnosis where a
method loses. An episode's *reach* is the farthest its goal coordinates got from where the episode
started (an ant that flails in place reaches ≈ 2 units in a maze of 5-unit cells; a cube that is never pushed,
0). *Unmoved* steps leave the goal coordinates where they were: a kinematic point's or a gridworld agent's move
into a wall is refused, so a policy that pursues goals behind walls shows here. *Saturation* is the fraction of continuous action components at a bound of [−1, 1] (the actor's tanh
range and the random baseline's): a TD3 actor whose Q gives its actions one direction everywhere pins them
there, and uniform random actions sit at a bound ≈ 1 % of the time (:data:`SATURATED`).

The run logs both every logging window (sun_lightning/callbacks/exploration.py). For a checkpoint of a run that did not::

    python -m sun_lightning.metrics.behaviour checkpoints/AntMazeS-sun-seed0/last.ckpt --since 0.6
"""

from __future__ import annotations

import argparse

import torch

from sun_lightning import keys
from sun_lightning.replay.storage import GoalReplayStorage

#: |a| at or above this counts as at a bound of [−1, 1] (uniform random actions: 1 % of components).
SATURATED = 0.99


def chronological_index(storage: GoalReplayStorage) -> torch.Tensor:
    """Positions ``[steps held, envs]`` of D's entries, the oldest step first."""
    held, envs = storage.steps_held, storage.num_envs
    steps = storage.steps - held + torch.arange(held, device=storage.device)
    return (steps.unsqueeze(1) * envs + torch.arange(envs, device=storage.device)) % storage.capacity


def episode_reach(goals: torch.Tensor, episode_end: torch.Tensor, since: int = 0) -> torch.Tensor:
    """The reach of every episode that ended at or after step ``since``.

    Args:
        goals: ``[T, E, d]`` goal coordinates of E env streams, oldest step first.
        episode_end: ``[T, E]``, true at an episode's last step.
        since: first step whose ending episodes count (a logging window's start); an episode that began before
            the oldest step held counts from there.

    Returns:
        ``[n]`` the farthest Euclidean distance of each such episode's goal coordinates from its first step's,
        in the order episodes end (by step, then stream).
    """
    steps, envs = episode_end.shape
    if steps == 0:
        return goals.new_zeros(0)
    ends = episode_end.bool()
    # episode number of each step within its stream: the ends before it
    started = torch.cumsum(ends.long(), 0) - ends.long()
    first = torch.zeros_like(ends)
    first[0] = True
    first[1:] = ends[:-1]
    episode = started * envs + torch.arange(envs, device=goals.device)  # unique per (stream, episode)
    count = int(episode.max()) + 1
    origin = goals.new_zeros(count, goals.shape[-1])
    origin[episode[first]] = goals[first]
    distance = (goals - origin[episode]).norm(dim=-1)
    farthest = goals.new_zeros(count).scatter_reduce(0, episode.reshape(-1), distance.reshape(-1), "amax")
    ended = ends.clone()
    ended[:since] = False
    return farthest[episode[ended]]


def unmoved_fraction(goals: torch.Tensor, next_goals: torch.Tensor) -> float:
    """Fraction of the steps after which the goal coordinates ``[..., d]`` are unchanged (within 1e-6)."""
    if not goals.numel():
        return float("nan")
    return float(torch.isclose(next_goals, goals, rtol=0.0, atol=1e-6).all(-1).float().mean())


def action_saturation(actions: torch.Tensor) -> float:
    """Fraction of the action components with |a| ≥ :data:`SATURATED` (continuous actions in [−1, 1])."""
    return float((actions.abs() >= SATURATED).float().mean()) if actions.numel() else float("nan")


def behaviour_metrics(storage: GoalReplayStorage, since_step: int) -> dict[str, float]:
    """``explore/episodes/reach`` (mean over the episodes that ended since ``since_step``, an absolute vector-env
    step; continuous goal spaces), ``explore/actions/unmoved`` and, for continuous actions,
    ``explore/actions/saturation`` over the steps since then. Empty where nothing is held."""
    if len(storage) == 0:
        return {}
    index = chronological_index(storage)
    since = max(since_step - (storage.steps - storage.steps_held), 0)
    entries = storage.get(index, (keys.OBS, keys.ACTION, keys.NEXT_OBS, keys.EPISODE_END)).cpu()
    out = {}
    if since < index.shape[0]:
        project = storage.space.project
        out["explore/actions/unmoved"] = unmoved_fraction(project(entries[keys.OBS][since:]),
                                                          project(entries[keys.NEXT_OBS][since:]))
    if not storage.space.exact_counts:  # a gridworld's goals are one-hot tiles: no distance to speak of
        reach = episode_reach(storage.space.project(entries[keys.OBS]).float(), entries[keys.EPISODE_END], since)
        if reach.numel():
            out["explore/episodes/reach"] = float(reach.mean())
    if not storage.space.discrete and since < index.shape[0]:
        out["explore/actions/saturation"] = action_saturation(entries[keys.ACTION][since:])
    return out


def checkpoint_behaviour(path: str, since_fraction: float = 0.0) -> dict[str, float]:
    """:func:`behaviour_metrics` of the D a checkpoint holds, over its steps from ``since_fraction`` of the run on."""
    from sun_lightning.envs.registry import goal_space
    from sun_lightning.checkpoints.safe_pickle import read_checkpoint

    checkpoint = read_checkpoint(path)
    run, state = checkpoint["sun_run"], checkpoint["ExplorationDataModule"]
    streams = run["num_envs"] * state["world_size"]
    storage = GoalReplayStorage(goal_space(run["env_id"]), streams, state["storage"]["capacity"])
    storage.load_state_dict(state["storage"])
    return behaviour_metrics(storage, int(since_fraction * storage.steps))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sun_lightning.metrics.behaviour",
                                     description="Episode reach and action saturation of the D in checkpoints.")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--since", type=float, default=0.0, help="from this fraction of each run's steps on (0: all)")
    args = parser.parse_args(argv)
    for path in args.checkpoints:
        metrics = checkpoint_behaviour(path, args.since)
        print(path + ": " + "  ".join(f"{name.rsplit('/', 1)[-1]}={value:.3f}" for name, value in metrics.items()))


if __name__ == "__main__":
    main()
