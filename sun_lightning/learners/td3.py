"""The TD3 variant of SVF learning for continuous actions (SPEC §5b, paper appendix "GCRL Control")."""

from __future__ import annotations

import copy
from typing import Literal, NamedTuple

import torch
from tensordict import TensorDictBase
from torch.nn import functional as F

from sun_lightning import keys
from sun_lightning.domains import Fraction, NonNegativeFloat, OpenFraction, PositiveFloat, PositiveInt, Rate
from sun_lightning.envs.reach import goal_reached
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.learners.base import Learner, TrainStats, frozen
from sun_lightning.learners.graphs import Stepping, UpdateGraphs, count_optimizer_steps, graph_blockers, uses_graphs
from sun_lightning.learners.policy import GaussianNoisePolicy
from sun_lightning.learners.target import FollowStep, TargetUpdate
from sun_lightning.losses.td_lambda import watkins_lambda_returns
from sun_lightning.networks.encoders import RunningMeanStd, StandardizedRBF
from sun_lightning.networks.td3 import GoalActor, GoalCritic
from sun_lightning.replay.future import FutureGoalSampler

#: The critic's statistics of an update, in the order of :meth:`TD3SVF.critic_loss`'s vector.
TRAIN_STATS = ("train/loss/td", "train/q/taken", "train/q/target", "train/path/steps")
ACTOR_STATS = ("train/loss/actor",)


class Plan(NamedTuple):
    """What one update does besides the critic's step: a host-side schedule, so one captured graph per plan
    (:mod:`~sun_lightning.learners.graphs`). With the paper's settings two plans alternate: the critic alone,
    then the critic, the actor and the targets."""

    actor: bool  #: the actor's step, which the bootstrap actor follows
    critic_target: bool  #: the critic target's Polyak step

    @classmethod
    def at(cls, update: int, policy_delay: int, critic_target_due: bool) -> Plan:
        """The plan of the ``update``-th update (counted from 1): the actor steps every ``policy_delay``-th."""
        return cls(actor=update % policy_delay == 0, critic_target=critic_target_due)


class TD3SVF(Learner):
    """Learns Q(s, a, g_s) and a goal-conditioned actor π(s, g_s) with TD3 and TD(λ) targets (SPEC §5b).

    V(s, g) = Q(s, π(s, g), g) scores goals (SPEC §3). The reward is 1 and the step terminal where
    the state a step leads to is within η of the goal (the environment's reach rule). The critic's
    target is the TD(λ) return along each row's path to its goal (no Watkins cut, no clip of V);
    bootstraps use the bootstrap actor's action plus clipped Gaussian smoothing. The actor maximizes
    Q(s, π(s, g), g) every ``policy_delay`` updates; the critic target moves every ``target_every``
    updates by ``critic_tau``. The bootstrap actor ``actor_target`` (the "target actor" that the TD
    targets and DISCOVER's and MEGA's selections read) is the online actor as of the previous actor
    step, moved ``critic_tau`` towards the current one (:class:`~sun_lightning.learners.target.FollowStep`;
    DISCOVER's ``td3_train.py`` uses its one ``tau`` for both). MSE loss, AdamW, no gradient clipping.

    Args:
        goal_space: linked from the ``data`` config's environment by the CLI (dimensions, bounds, reach rule).
        gamma: discount γ.
        lam: trace factor λ.
        critic_tau: τ, the Polyak rate of the critic's target; after each actor step the bootstrap actor is
            (1 − τ)·π_before + τ·π_after (the official code's one ``tau``, 0.005). The paper's "actor Polyak
            5e-7" (an earlier ``actor_tau``) moved a slow copy the official runs never read; it is gone.
        target_every: updates between target updates.
        policy_delay: updates between actor updates.
        lr: AdamW learning rate (both networks).
        weight_decay: AdamW weight decay.
        target_noise, target_noise_clip: std and clip of the target policy's smoothing noise.
        exploration_noise: std of the acting policy's Gaussian noise.
        batch_size: rows per update (256).
        horizon: T_max, the longest path to a future goal (50).
        future_fraction: share of rows relabelled with a future goal (0.5).
        hidden, features, maxout_width, maxout_pieces, head_width: the networks' widths (256, 64, 1024, 4, 256).
        rbf_centres: RBF tiles per input dimension (SPEC §5c).
        paths: how the targets' bootstraps are laid out: ``compact`` (only the path steps that need one:
            fewest rows, a data-dependent shape), ``padded`` (every step of ``[batch_size, horizon]``, masked:
            fixed shapes and no host sync, for CUDA and graph capture) or ``auto`` (padded on CUDA, compact on
            CPU). Both give the same targets.
        compile_targets: run the target actor and critic through ``torch.compile`` (fused elementwise work
            around the matrix products; the first updates pay the compilation).
        cuda_graph: capture the update as CUDA graphs and replay them (:mod:`~sun_lightning.learners.graphs`):
            ``auto`` on a CUDA device where nothing blocks it (DDP, loss scaling, compiled targets, compact
            paths), ``true`` insists (an error names what blocks it), ``false`` never. The optimizers are then
            capturable; the numbers are the eager update's within float rounding.
    """

    ddp_find_unused_parameters = True  # the critic's step leaves the actor out, and the actor's the critic

    def __init__(
        self,
        goal_space: GoalSpace | None = None,
        gamma: OpenFraction = 0.99,
        lam: Fraction = 0.95,
        critic_tau: Rate = 0.005,
        target_every: PositiveInt = 2,
        policy_delay: PositiveInt = 2,
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.01,
        target_noise: NonNegativeFloat = 0.2,
        target_noise_clip: NonNegativeFloat = 0.5,
        exploration_noise: NonNegativeFloat = 0.4,
        batch_size: PositiveInt = 256,
        horizon: PositiveInt = 50,
        future_fraction: Fraction = 0.5,
        hidden: PositiveInt = 256,
        features: PositiveInt = 64,
        maxout_width: PositiveInt = 1024,
        maxout_pieces: PositiveInt = 4,
        head_width: PositiveInt = 256,
        rbf_centres: PositiveInt = 20,
        paths: Literal["auto", "compact", "padded"] = "auto",
        compile_targets: bool = False,
        cuda_graph: bool | Literal["auto"] = "auto",
    ) -> None:
        super().__init__(goal_space)
        if goal_space.discrete:
            raise ValueError("TD3SVF needs a continuous-action environment (the DQN variant learns discrete actions)")
        if not 0.0 < gamma < 1.0 or not 0.0 <= lam <= 1.0:
            raise ValueError(f"need 0 < gamma < 1 and 0 <= lam <= 1, got gamma={gamma}, lam={lam}")
        if policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {policy_delay}")
        if paths not in ("auto", "compact", "padded"):
            raise ValueError(f"paths must be 'auto', 'compact' or 'padded', got {paths!r}")
        uses_graphs(cuda_graph, [])  # the setting's spelling, at once
        self.save_hyperparameters(ignore=["goal_space"])
        self.sampler = FutureGoalSampler(batch_size, horizon, future_fraction)
        self.obs_stats = RunningMeanStd(goal_space.obs_dim)
        sizes = dict(hidden=hidden, features=features, maxout_width=maxout_width, maxout_pieces=maxout_pieces,
                     head_width=head_width)
        self.critic = GoalCritic(*self._encoders(), goal_space.action_dim, **sizes)
        self.actor = GoalActor(*self._encoders(), goal_space.action_dim, **sizes)
        self.critic_target = self._target_of(self.critic)
        self.actor_target = self._target_of(self.actor)
        self.critic_target_update = TargetUpdate(self.critic, self.critic_target, critic_tau, target_every)
        self.actor_target_update = FollowStep(self.actor, self.actor_target, critic_tau)
        self.stats, self.actor_stats = TrainStats(TRAIN_STATS), TrainStats(ACTOR_STATS)
        self._compiled: tuple | None = None  # (actor', critic') compiled on first use; a tuple: not submodules
        self._graphs: UpdateGraphs | None = None  # set by configure_optimizers where the update is captured

    def _encoders(self) -> tuple[StandardizedRBF, StandardizedRBF]:
        """φ(s) and φ(g) of one network: its own RBF layers over the shared running statistics (SPEC §5c)."""
        c = self.hparams.rbf_centres
        return StandardizedRBF(self.obs_stats, None, c), StandardizedRBF(self.obs_stats, self.goal_space.goal_dims, c)

    def _target_of(self, net: torch.nn.Module) -> torch.nn.Module:
        target = copy.deepcopy(net).requires_grad_(False)
        target.obs_encoder.stats = target.goal_encoder.stats = self.obs_stats  # one set of statistics
        return target

    def observe(self, obs: torch.Tensor) -> None:
        """Update the running observation statistics with collected frames (SPEC §5c)."""
        self.obs_stats.update(obs.to(self.obs_stats.mean.device))

    # ---- what data collection reads --------------------------------------------------
    def make_policy(self, uses_goals: bool = True) -> GaussianNoisePolicy:
        return GaussianNoisePolicy(self, self.goal_space.action_dim, self.hparams.exploration_noise, uses_goals)

    def make_sampler(self) -> FutureGoalSampler:
        return self.sampler

    @torch.no_grad()
    def act(self, obs: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """π(s, g) ``[B, action_dim]``, the acting policy's mean action."""
        self.check_goal(goal)
        with self.inference_context():
            return self.actor(obs, goal)

    @torch.no_grad()
    def goal_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
        goal_keys: torch.Tensor | None = None, actor: Literal["online", "target"] = "online",
    ) -> tuple[torch.Tensor, None]:
        """V(s, g) = Q(s, π(s, g), g) of K candidates per state ``[B, K]`` (``[E, B, K]`` for ensembles; SPEC §3, §5b),
        acting with the online actor π or, for ``actor="target"``, the bootstrap actor π' (DISCOVER's official
        selection: ``compute_value_function`` reads ``target_policy_params``)."""
        self.check_goal(goal)
        obs = obs.unsqueeze(1).expand(*goal.shape[:2], obs.shape[-1])
        policy = self.actor if actor == "online" else self.actor_target
        with self.inference_context():
            return self.critic_values(obs, policy(obs, goal), goal), None

    def critic_values(self, obs: torch.Tensor, action: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """Q(s, a, g) of the online critic (every member's, ``[E, ...]``, for ensembles)."""
        return self.critic(obs, action, goal)

    # ---- learning: one update, top to bottom ------------------------------------------
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        graphed = uses_graphs(hp.cuda_graph, self.graph_blockers(self.device))
        self._graphs = UpdateGraphs(self.update_step) if graphed else None
        # capturable: the step count lives on the device, so a replayed step reads no host value
        options = dict(lr=hp.lr, weight_decay=hp.weight_decay, fused=True, capturable=graphed)
        return [torch.optim.AdamW(self.critic.parameters(), **options),
                torch.optim.AdamW(self.actor.parameters(), **options)]

    def graph_blockers(self, device: torch.device) -> list[str]:
        """Why the update cannot be captured on ``device`` (:func:`~sun_lightning.learners.graphs.graph_blockers`
        and what is TD3's own)."""
        reasons = graph_blockers(self, device)
        if self.hparams.compile_targets:
            reasons.append("compile_targets compiles with dynamic shapes")
        if not self.padded(device):
            reasons.append("paths=compact gives the bootstraps data-dependent shapes")
        return reasons

    def update(self, batch: TensorDictBase) -> None:
        """One TD3 update (SPEC §5b), as :meth:`~sun_lightning.learners.base.Learner.training_step` calls it:
        this update's :class:`Plan`, its steps (:meth:`update_step`, eagerly or as the plan's captured graph),
        then the counts and statistics the host keeps."""
        plan = Plan.at(self.updates + 1, self.hparams.policy_delay, self.critic_target_update.due)
        if self._graphs is None:
            out = self.update_step(batch, plan, Stepping.eager(self))
        else:
            out = self._graphs(batch, plan)
            self.after_replay(out, plan)
        self.updates += 1
        self.critic_target_update.advance()
        self.stats.add(out["stats"])
        if plan.actor:
            self.actor_stats.add(out["actor"])

    def update_step(self, batch: TensorDictBase, plan: Plan, stepping: Stepping | None = None) -> dict[str, torch.Tensor]:
        """The steps ``plan`` names, in order: the critic's; the actor's, which the bootstrap actor follows; the
        critic target's Polyak step. ``stepping`` takes the gradient steps (a captured graph's by default: what
        :class:`~sun_lightning.learners.graphs.UpdateGraphs` records once per plan). Returns the critic's
        statistics (``stats``, :data:`TRAIN_STATS`) and, with the actor's step, its loss (``actor``, ``[1]``)."""
        stepping = stepping or Stepping.captured(self)
        out = {"stats": self.critic_step(batch, stepping)}
        if plan.actor:
            out["actor"] = self.actor_step(batch, stepping)
        if plan.critic_target:
            self.critic_target_update.move()
        return out

    def critic_step(self, batch: TensorDictBase, stepping: Stepping) -> torch.Tensor:
        """One AdamW step of the critic on :meth:`critic_loss`; returns its statistics."""
        optimizer = stepping.optimizers[0]
        loss, stats = self.critic_loss(batch)
        stepping.check("train/loss/td", loss, self.updates)
        optimizer.zero_grad(set_to_none=True)
        stepping.backward(loss)
        optimizer.step()
        return stats

    def actor_step(self, batch: TensorDictBase, stepping: Stepping) -> torch.Tensor:
        """One AdamW step of the actor on :meth:`actor_loss`, the bootstrap actor following it
        (:class:`~sun_lightning.learners.target.FollowStep`); returns the loss ``[1]``."""
        optimizer = stepping.optimizers[1]
        # The critic is held fixed: frozen, so that its parameters are outside the actor loss's graph
        # (DDP then sees them unused in this backward, as in the critic's backward the actor's are).
        with frozen(self.critic):
            loss = self.actor_loss(batch)
            stepping.check("train/loss/actor", loss, self.updates + 1)
            optimizer.zero_grad(set_to_none=True)
            stepping.backward(loss)
        self.actor_target_update.before()
        optimizer.step()
        self.actor_target_update.after()
        return loss.detach().reshape(1)

    def after_replay(self, out: dict[str, torch.Tensor], plan: Plan) -> None:
        """What a replayed graph leaves to the host: Lightning counts its optimizer steps, and its losses are
        read with the training step's other deferred checks (:meth:`~sun_lightning.learners.base.Learner.flush_finite_checks`)."""
        optimizers = self.optimizers()
        count_optimizer_steps(optimizers if plan.actor else optimizers[:1])
        self.check_finite("train/loss/td", out["stats"][0])
        if plan.actor:
            self.check_finite("train/loss/actor", out["actor"][0], self.updates + 1)

    def critic_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """MSE of Q(s_t, a_t, g) against the TD(λ) target, and its statistics ``[len(TRAIN_STATS)]``."""
        target, steps = self.td_targets(batch)
        q = self.critic(batch[keys.OBS], batch[keys.ACTION], batch[keys.GOAL])
        loss = F.mse_loss(q, target)  # both float32 (the critic's softplus output is)
        return loss, torch.stack([loss.detach(), q.detach().mean(), target.mean(), steps])

    @torch.no_grad()
    def td_targets(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """The TD(λ) target of each row along its path ``[..., N]``, and the mean path length of its future rows.

        Along a row's path of k steps (``PATH_VALID``), step j leads to s'_j: reward r_j = 1 and terminal
        where s'_j reaches the goal (the environment's reach rule), terminal where the episode terminated,
        bootstrap B_j = Q'(s'_j, clip(π'(s'_j, g) + clip(ε, −c, c), −1, 1), g) with ε ~ N(0, σ²) (π': the
        bootstrap actor). Then
        G_{k−1} = r + γ(1 − d)B and G_j = r_j + γ(1 − d_j)((1 − λ)B_j + λG_{j+1}); the target is G_0.
        Returns, rewards and bootstraps are float32 whatever the autocast dtype of the networks.

        Args:
            batch: rows ``[N]`` of :class:`~sun_lightning.replay.future.FutureGoalSampler` (``[E, N]`` for
                an ensemble: member e's rows bootstrap from its own target critic).
        """
        hp = self.hparams
        goal, valid = batch[keys.GOAL], batch[keys.PATH_VALID]
        next_obs = batch[keys.PATH_NEXT_OBS]
        path_goal = goal.unsqueeze(-2).expand(*valid.shape, goal.shape[-1])
        scale = batch.get(keys.GOAL_SCALE, None)  # the "radius" rule's σ̃ (an env given with data.goal)
        reward = goal_reached(self.goal_space, self.goal_space.project(next_obs), None, path_goal, None,
                              None if scale is None else scale.unsqueeze(-2))
        done = reward | batch[keys.PATH_TERMINATED]
        # Bootstraps only where a path step needs one: on the path, not terminal.
        bootstrap = self.path_bootstraps(next_obs, goal, valid & ~done)
        cont = torch.cat([valid[..., 1:], torch.zeros_like(valid[..., :1])], -1)  # the trace runs on along the path
        target = watkins_lambda_returns(reward.float(), done.float(), bootstrap, cont.float(), hp.gamma, hp.lam)[..., 0]
        future = batch[keys.FUTURE].float()
        steps = (valid.sum(-1) * future).sum() / future.sum().clamp(min=1.0)  # no host sync
        return target, steps

    def padded(self, device: torch.device) -> bool:
        """Whether bootstraps are computed on every path step ``[N, T_max]`` (fixed shapes, no host sync: CUDA)
        rather than on the steps that need one (fewer rows: CPU); ``paths`` decides, ``auto`` by device."""
        paths = self.hparams.paths
        return paths == "padded" or (paths == "auto" and device.type != "cpu")

    def path_bootstraps(self, next_obs: torch.Tensor, goal: torch.Tensor, need: torch.Tensor) -> torch.Tensor:
        """B_j of :meth:`td_targets` where ``need`` ``[N, H]``, else 0: float32 ``[N, H]`` (``goal``: each row's ``[N, G]``)."""
        n, h = need.shape
        if self.padded(next_obs.device):
            row = torch.arange(n, device=need.device).repeat_interleave(h)
            values = self.target_values(next_obs.flatten(0, 1), goal, row, self.target_nets()[1])
            return torch.where(need, values.view(n, h), 0.0)
        steps = need.nonzero(as_tuple=True)
        bootstrap = torch.zeros(need.shape, dtype=torch.float32, device=need.device)
        return bootstrap.index_put_(steps, self.target_values(next_obs[steps], goal, steps[0], self.target_nets()[1]))

    def target_nets(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The bootstrap actor and the target critic, compiled when ``compile_targets`` is set (the same parameters)."""
        if not self.hparams.compile_targets:
            return self.actor_target, self.critic_target
        if self._compiled is None:
            self._compiled = (torch.compile(self.actor_target, dynamic=True), torch.compile(self.critic_target, dynamic=True))
        return self._compiled

    def target_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_index: torch.Tensor, critic) -> torch.Tensor:
        """Q'(s, clip(π'(s, g) + clip(ε, −c, c), −1, 1), g) in float32: the bootstrap actor with TD3's smoothing noise.

        Args:
            obs: states ``[..., L, obs_dim]``.
            goal: a goal table ``[..., R, goal_dim]``; ``goal_index`` ``[..., L]`` gives each state's row.
            critic: Q' as ``(obs, action, goal, goal_index) -> values``.
        """
        hp = self.hparams
        action = self.target_nets()[0](obs, goal, goal_index)
        noise = (torch.randn_like(action) * hp.target_noise).clamp(-hp.target_noise_clip, hp.target_noise_clip)
        return critic(obs, (action + noise).clamp(-1.0, 1.0), goal, goal_index).float()

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """−Q(s, π(s, g), g) averaged over the batch's rows (and the critics of an ensemble)."""
        obs, goal = batch[keys.OBS], batch[keys.GOAL]
        return -self.critic_values(obs, self.actor(obs, goal), goal).mean()

    def pop_train_metrics(self) -> dict[str, float]:
        out = self.stats.pop()
        out.update(self.actor_stats.pop())
        if out:
            out["train/updates/total"] = float(self.updates)
        return out

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["sun_target_update"] = {"critic": self.critic_target_update.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("sun_target_update")
        if state:  # an older checkpoint's "actor" schedule has no use: the bootstrap actor follows every actor step
            self.critic_target_update.load_state_dict(state["critic"])

