"""What one vector step holds for the loop, and the goal statistics of a logging window (SPEC §7)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from sun_lightning import keys

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

#: What ``goals`` listeners get (:mod:`~sun_lightning.exploration.events`), each ``[B]`` (one row per env): ``goal`` ``[B, goal_dim]`` and ``goal_action`` (the goal
#: pursued from this step's state), ``goal_selected`` (drawn at this state), ``goal_reselected`` (drawn other than at
#: an episode start) and ``goal_reached`` (this step reached the row's ``goal``).
GOAL_VIEW = (keys.GOAL, keys.GOAL_ACTION, keys.GOAL_SELECTED, keys.GOAL_RESELECTED, keys.GOAL_REACHED)


def flat_step(step: TensorDictBase) -> dict[str, torch.Tensor]:
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
        """Count one vector step (``flat_step``'s keys)."""
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
            "explore/goals/steps_to_goal": self.steps_to_goal / self.reached if self.reached else 0.0,
            "explore/goals/reselection_rate": self.reselected / frames,
            "explore/goals/random_fraction": self.random_frames / frames,
            "explore/goals/rule_fired": self.rule_fired / frames,
            "explore/goals/held_unmoved": self.held_unmoved / frames,
            "explore/episodes/count": float(self.episodes),
        }
        if self.ended:  # 0 of 0 is no success rate: a window where no goal ended has none, not 0
            out["explore/goals/success"] = self.ended_reached / self.ended
        self.reset()
        return out
