"""TensorDict keys shared by environments, transforms, storage, losses and callbacks.

One module so that every producer and consumer of a key agrees on its name.
"""

OBS = "observation"
ACTION = "action"
NEXT = "next"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
NEXT_OBS = ("next", "observation")
# The step ended its episode (terminated or truncated): traces and HER
# segments never cross it (SPEC §5a).
EPISODE_END = "episode_end"

# Goal pursued at this step (SPEC §2): the state projection g_s and, for
# discrete-action environments, the goal action g_a.
GOAL = "goal"
GOAL_ACTION = "goal_action"

# Selection bookkeeping written by the goal transform.
GOAL_SELECTED = "goal_selected"      # a new goal was selected for this step
GOAL_RESELECTED = "goal_reselected"  # selected other than at an episode start
GOAL_REACHED = "goal_reached"        # the step leading here reached the goal
GOAL_STEPS = "goal_steps"            # on the step reaching a goal: steps it took (else 0)
RANDOM_PHASE = "random_phase"        # acting uniformly at random (episodic rules)
# Q(s, ·, g_s, g_a) [B, |A|] of the state and goal, where the goal transform evaluated it this
# step (NaN elsewhere): the policy acts on it instead of evaluating the network again.
ACTION_VALUES = "action_values"

# Learning batches (SPEC §5a): the distinct states and goals of a batch are
# stored once, as tables, and the [groups, T] rows index into them, so the
# network's state and goal branches run once per distinct input.
STATES = "states"                    # [U_s, obs_dim]
GOALS = "goals"                      # [U_g, goal_dim]
STATE_INDEX = "state_index"          # [N, T] row -> s_t in STATES
NEXT_STATE_INDEX = "next_state_index"  # [N, T] row -> s_{t+1} (as stored) in STATES
GOAL_INDEX = "goal_index"            # [N, T] row -> g_t in GOALS

# Learning batches of the TD3 variant (SPEC §5b): per row, its goal and the path of up to T_max steps to it.
FUTURE = "future"                    # [N] the goal is a future state of the row's trajectory (else uniform)
PATH_NEXT_OBS = "path_next_obs"      # [N, H, obs_dim] the state each path step led to
PATH_TERMINATED = "path_terminated"  # [N, H] the path step terminated its episode
PATH_VALID = "path_valid"            # [N, H] the step lies on the row's path (steps 0 … k − 1)
GOAL_SCALE = "goal_scale"            # [N, goal_dim] σ̃ of the "radius" reach rule (SPEC §4), where it is the rule
