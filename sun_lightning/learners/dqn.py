"""The DQN variant of SVF learning for discrete actions (SPEC §5a, paper appendix "Gridworlds and Classic Control")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase
from torch.nn import functional as F

from sun_lightning import keys
from sun_lightning.domains import Dropout, Fraction, NonNegativeFloat, NonNegativeInt, OpenFraction, PositiveFloat, PositiveInt, Rate
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.learners.base import Learner, TrainStats
from sun_lightning.learners.graphs import Stepping, UpdateGraphs, count_optimizer_steps, graph_blockers, uses_graphs
from sun_lightning.learners.policy import EpsilonGreedyPolicy
from sun_lightning.learners.target import TargetUpdate
from sun_lightning.losses.td_lambda import double_q_bootstrap, greedy_within, watkins_lambda_returns
from sun_lightning.native import q_loss as native_loss
from sun_lightning.networks.encoders import RunningMeanStd, StandardizedRBF
from sun_lightning.networks.q_network import GoalQNetwork
from sun_lightning.replay.hindsight import SegmentedHindsightSampler

QFunction = Callable[..., torch.Tensor]
#: The training statistics of an update, in the order of :meth:`DQNSVF.loss_and_stats`'s vector
#: (documented in the README's metrics table).
TRAIN_STATS = ("train/loss/td", "train/q/taken", "train/q/target", "train/trace/continue")


class Plan(NamedTuple):
    """What one update does besides the gradient step: a host-side schedule, so one captured graph per plan
    (:mod:`~sun_lightning.learners.graphs`)."""

    target: bool  #: the target network's Polyak step


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)`` for parameters on one device and of one
    dtype: the same operations (bit for bit) without its grouping and wrappers, which cost as much as the
    operations on the DQN's ten small tensors, once per update."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


class DQNSVF(Learner):
    """Learns Q(s, a, g_s, g_a) with Double DQN, TD(λ) and Watkins's cut traces (SPEC §5a).

    The reward is 1 and the step terminal when (s, a) matches the goal. Two
    changes to Watkins's Q(λ) from the paper: the bootstrap
    max_a Q(s', a, g) is clipped to ``bootstrap_clip`` and an action counts as
    greedy (trace kept) when its value is within 1 − γ of the max. V(s, g) for
    selection is max_a Q(s, a, g_s, g_a) (SPEC §3); the policy is ε-greedy on Q.

    Args:
        goal_space: linked from the ``data`` config's environment by the CLI (dimensions, action count).
        gamma: discount γ.
        lam: trace factor λ.
        tau: Polyak coefficient of the target network, applied every update.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clip (``clip_grad_norm_``).
        huber_delta: Huber loss threshold.
        bootstrap_clip: upper clip of the bootstrap value (V ≤ 1).
        epsilon: ε of the ε-greedy acting policy.
        width: hidden width of Q.
        maxout_pieces: pieces of the maxout layer.
        dropout: dropout of the state and goal branches.
        init_std: std of the N(0, std²) weight initialisation.
        encoder: input encoder φ (SPEC §5c): ``identity`` (one-hot gridworlds),
            ``rbf`` (running standardization + RBF layer) or ``auto`` (identity
            where counts are exact, RBF otherwise).
        rbf_centres: RBF tiles per input dimension.
        num_sequences: runs per learning batch (16).
        sequence_length: steps per run, the TD(λ) horizon T (16).
        relabels: segmented-future relabellings per run (4).
        negatives: pair every relabelling with a random goal from D.
        backend: how the loss is computed on CPU: ``torch`` (the reference), ``native`` (the loss and its
            gradient in one C call, :mod:`sun_lightning.native.q_loss`; needs a C compiler) or ``auto``
            (native on CPU where it builds, else torch with a warning). Other devices, and the
            ensembles, always run torch.
        cuda_graph: capture the update as a CUDA graph and replay it (:mod:`~sun_lightning.learners.graphs`):
            ``auto`` on a CUDA device where nothing blocks it (DDP, loss scaling), ``true`` insists, ``false``
            never. The loss then gives every step's next state a row of its own (fixed shapes, no host read)
            instead of reusing the next step's row; the same targets up to dropout's draws.
    """

    def __init__(
        self,
        goal_space: GoalSpace | None = None,
        gamma: OpenFraction = 0.99,
        lam: Fraction = 0.95,
        tau: Rate = 0.001,
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.01,
        grad_clip: PositiveFloat = 1.0,
        huber_delta: PositiveFloat = 1.0,
        bootstrap_clip: PositiveFloat = 1.0,
        epsilon: Fraction = 0.1,
        width: PositiveInt = 64,
        maxout_pieces: PositiveInt = 4,
        dropout: Dropout = 0.1,
        init_std: PositiveFloat = 0.01,
        encoder: Literal["auto", "identity", "rbf"] = "auto",
        rbf_centres: PositiveInt = 20,
        num_sequences: PositiveInt = 16,
        sequence_length: PositiveInt = 16,
        relabels: NonNegativeInt = 4,
        negatives: bool = True,
        backend: Literal["auto", "torch", "native"] = "auto",
        cuda_graph: bool | Literal["auto"] = "auto",
    ) -> None:
        super().__init__(goal_space)
        if not goal_space.discrete:
            raise ValueError("DQNSVF needs a discrete-action environment (the TD3 variant learns continuous actions)")
        if not 0.0 < gamma < 1.0 or not 0.0 <= lam <= 1.0:
            raise ValueError(f"need 0 < gamma < 1 and 0 <= lam <= 1, got gamma={gamma}, lam={lam}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        if backend not in ("auto", "torch", "native"):
            raise ValueError(f"backend must be 'auto', 'torch' or 'native', got {backend!r}")
        uses_graphs(cuda_graph, [])  # the setting's spelling, at once
        self.save_hyperparameters(ignore=["goal_space"])
        self._graphs: UpdateGraphs | None = None  # set by configure_optimizers where the update is captured
        self.sampler = SegmentedHindsightSampler(num_sequences, sequence_length, relabels, negatives)
        if encoder == "auto":
            encoder = "identity" if goal_space.exact_counts else "rbf"
        obs_encoder = goal_encoder = None
        obs_width, goal_width = goal_space.obs_dim, goal_space.goal_dim
        self.obs_stats = None
        if encoder == "rbf":
            self.obs_stats = RunningMeanStd(goal_space.obs_dim)
            obs_encoder = StandardizedRBF(self.obs_stats, None, rbf_centres)
            goal_encoder = StandardizedRBF(self.obs_stats, goal_space.goal_dims, rbf_centres)
            obs_width, goal_width = obs_encoder.out_features, goal_encoder.out_features
        elif encoder != "identity":
            raise ValueError(f"unknown encoder {encoder!r}; use 'auto', 'identity' or 'rbf'")
        self.q = GoalQNetwork(
            obs_width, goal_width, goal_space.num_actions, width, maxout_pieces, dropout, init_std, obs_encoder, goal_encoder
        )
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        if self.obs_stats is not None:
            # One set of observation statistics, seen by both networks.
            self.q_target.obs_encoder.stats = self.q_target.goal_encoder.stats = self.obs_stats
        self.target_update = TargetUpdate(self.q, self.q_target, tau)
        self.stats = TrainStats(TRAIN_STATS)

    def observe(self, obs: torch.Tensor) -> None:
        """Update the running observation statistics with collected frames (SPEC §5c)."""
        if self.obs_stats is not None:
            self.obs_stats.update(obs.to(self.obs_stats.mean.device))

    # ---- what data collection reads --------------------------------------------------
    def make_policy(self, uses_goals: bool = True) -> EpsilonGreedyPolicy:
        return EpsilonGreedyPolicy(self, self.goal_space.num_actions, self.hparams.epsilon, uses_goals)

    def make_sampler(self) -> SegmentedHindsightSampler:
        return self.sampler

    @torch.no_grad()
    def action_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor) -> torch.Tensor:
        """Q(s, ·, g_s, g_a) ``[B, |A|]``: the values the ε-greedy policy acts on."""
        with self.inference_context():
            return self.q(obs, goal, goal_action=goal_action)

    @torch.no_grad()
    def goal_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with self.inference_context():
            return self._goal_values(obs, goal, goal_action, goal_keys)

    def _goal_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s, g) = max_a Q(s, a, g_s, g_a) ``[B, K]`` and Q(s, ·, g_s, g_a) ``[B, K, |A|]`` (SPEC §3).

        With ``goal_keys``, each (state, distinct goal projection) is one row of Q, whose |A| × |A|
        outputs serve all of that goal's candidates whatever their goal actions: candidates drawn from
        a gridworld's replay storage repeat tiles, so selection evaluates several times fewer rows.
        """
        self.check_goal(goal)
        b, k = goal.shape[:2]
        if goal_keys is None:
            # Each state's branch runs once for its K candidates.
            state_index = torch.arange(b, device=obs.device).repeat_interleave(k)
            q = self.q(obs, goal.flatten(0, 1), obs_index=state_index, goal_action=goal_action.flatten()).view(b, k, -1)
            return q.amax(-1), q
        span = int(goal_keys.max()) + 1
        key = (goal_keys + span * torch.arange(b, device=goal_keys.device).unsqueeze(1)).flatten()
        distinct, inverse = torch.unique(key, return_inverse=True)
        # one candidate of each distinct (state, goal): equal keys have equal goals, so any of them
        first = torch.empty_like(distinct).scatter_(0, inverse, torch.arange(b * k, device=key.device))
        state_index = torch.div(first, k, rounding_mode="floor")
        full = self.q(obs, goal.flatten(0, 1).index_select(0, first), obs_index=state_index)
        a = full.shape[-1]
        q = full.index_select(0, inverse).gather(-1, goal_action.reshape(-1, 1, 1).expand(-1, a, 1)).view(b, k, a)
        return q.amax(-1), q

    # ---- learning ---------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        graphed = uses_graphs(self.hparams.cuda_graph, graph_blockers(self, self.device))
        self._graphs = UpdateGraphs(self.update_step) if graphed else None
        # fused: one C++ pass over the parameters on CPU and CUDA (foreach launches a dozen ops per step);
        # capturable: the step count lives on the device, so a replayed step reads no host value
        return torch.optim.AdamW(self.q.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay,
                                 fused=True, capturable=graphed)

    def clip_gradients(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Gradient-norm clip of Q. Float32 and bf16 gradients carry no loss scale, so they are clipped directly
        (Lightning's own path refuses fused optimizers under its precision plugins); a loss-scaling precision
        (``16-mixed``) takes Lightning's path."""
        trainer = self._trainer
        if trainer is not None and getattr(trainer.precision_plugin, "scaler", None) is not None:
            return super().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        clip_grad_norm(optimizer.param_groups[0]["params"], gradient_clip_val)

    def update(self, batch: TensorDictBase) -> None:
        """One DQN update (SPEC §5a), as :meth:`~sun_lightning.learners.base.Learner.training_step` calls it: this
        update's :class:`Plan`, its steps (:meth:`update_step`, eagerly or as the plan's captured graph), then the
        counts and statistics the host keeps."""
        plan = Plan(target=self.target_update.due)
        if self._graphs is None:
            out = self.update_step(batch, plan, Stepping.eager(self))
        else:
            out = self._graphs(batch, plan)
            count_optimizer_steps([self.optimizers()])
            self.check_finite("train/loss/td", out["stats"][0])  # read at the training step's end, after the update
        self.target_update.advance()
        self.updates += 1
        self.stats.add(out["stats"])

    def update_step(self, batch: TensorDictBase, plan: Plan, stepping: Stepping | None = None) -> dict[str, torch.Tensor]:
        """The steps of one update, in order: Huber TD(λ) loss, backward, gradient-norm clip, AdamW step and, where
        ``plan`` says, the target's Polyak step. ``stepping`` takes the gradient step (a captured graph's by
        default). Returns the statistics (``stats``)."""
        stepping = stepping or Stepping.captured(self)
        loss, stats = self.loss_and_stats(batch)
        stepping.check("train/loss/td", loss, self.updates)
        optimizer = stepping.optimizers[0]
        for p in optimizer.param_groups[0]["params"]:  # zero_grad(set_to_none=True) without its per-call machinery
            p.grad = None
        stepping.backward(loss)
        self.clip_gradients(optimizer, self.hparams.grad_clip, "norm")
        optimizer.step()
        if plan.target:
            self.target_update.move()
        return {"stats": stats}

    def pop_train_metrics(self) -> dict[str, float]:
        out = self.stats.pop()
        if out:
            out["train/updates/total"] = float(self.updates)
        return out

    def loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Huber loss of Q(s_t, a_t, g_t) against Watkins TD(λ) targets over ``[N, T]`` rows, and its
        statistics by name (:data:`TRAIN_STATS`)."""
        loss, stats = self.loss_and_stats(batch)
        return loss, dict(zip(TRAIN_STATS, stats.unbind()))

    def loss_and_stats(self, batch: TensorDictBase, **td_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`loss` with its statistics as one detached vector ``[len(TRAIN_STATS)]``.

        The one dispatch point of the native kernel (``backend``); ``td_kwargs`` (other networks, as
        the ensembles pass) always take the torch path.
        """
        hp = self.hparams
        if not td_kwargs and self._native(batch):
            return native_loss.q_loss(self.q, self.q_target, batch, hp.gamma, hp.lam, hp.bootstrap_clip,
                                      1.0 - hp.gamma, hp.huber_delta)
        q_taken, target, cont = self.td_targets(batch, **td_kwargs)
        loss = F.huber_loss(q_taken, target, delta=self.hparams.huber_delta)
        return loss, torch.stack([loss.detach(), q_taken.detach().mean(), target.mean(), cont.float().mean()])

    def _native(self, batch: TensorDictBase) -> bool:
        """Whether this batch's loss runs the C kernel: float32 tables on the CPU and a backend that allows it."""
        backend = self.hparams.backend
        states = batch[keys.STATES]
        if backend == "torch" or states.device.type != "cpu" or states.dtype != torch.float32:
            return False
        return backend == "native" or native_loss.available()

    def td_targets(
        self, batch: TensorDictBase, q_fn: QFunction | None = None, q_target_fn: QFunction | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q(s_t, a_t, g_t) (with grad), its TD(λ) target and the trace-continuation mask, each ``[N, T]``.

        Batch rows ``[N, T]`` (see ``SegmentedHindsightSampler.sample``) are runs of consecutive
        steps sharing the goal of their segment (SPEC §5a): reward 1 and terminal where (s_t, a_t)
        reaches the goal; episode ends cut traces.

        Args:
            batch: a relabelled batch (see ``SegmentedHindsightSampler``).
            q_fn, q_target_fn: online and target networks with the signature of
                ``GoalQNetwork.forward`` (tables, row indices and goal actions) returning ``[rows, A]``;
                this module's own by default (ensembles pass their members').
        """
        q_fn = q_fn or self.q
        q_target_fn = q_target_fn or self.q_target
        hp = self.hparams
        action, reward, goal_action = batch[keys.ACTION], batch[keys.REWARD], batch[keys.GOAL_ACTION]
        n, t = action.shape
        num_actions = self.goal_space.num_actions
        # The next state of step t is row t + 1 (same goal unless t ended its segment, where the
        # bootstrap is unused), except at episode ends and at the last step: those next states get
        # rows of their own, appended after the N·T rows.
        extra, at = self._extra_steps(batch, every=self._graphs is not None)
        # one gather for the three row entries: [state, goal, goal action] then their next-state rows
        steps = torch.stack([batch[keys.STATE_INDEX], batch[keys.GOAL_INDEX], goal_action]).flatten(1)
        nexts = torch.stack([batch[keys.NEXT_STATE_INDEX], batch[keys.GOAL_INDEX], goal_action]).flatten(1)
        state_index, goal_index, goal_action_rows = torch.cat([steps, nexts.index_select(1, at)], dim=1)
        states, goals = batch[keys.STATES], batch[keys.GOALS]
        index = dict(obs_index=state_index, goal_index=goal_index, goal_action=goal_action_rows)  # Q(·, ·, g_s, g_a)
        q = q_fn(states, goals, dropout=True, **index)
        with torch.no_grad():
            q_target = q_target_fn(states, goals, **index)
            q_seq = q[: n * t].detach().view(n, t, num_actions)
            online_next = self._next_rows(q_seq, q[n * t :].detach(), at)
            target_next = self._next_rows(q_target[: n * t].view(n, t, num_actions), q_target[n * t :], at)
            bootstrap = double_q_bootstrap(online_next, target_next, hp.bootstrap_clip)
            next_action = torch.roll(action, -1, dims=1)
            cont = greedy_within(online_next, next_action, 1.0 - hp.gamma) & ~extra
            done = (reward > 0) | batch[keys.TERMINATED]
            target = watkins_lambda_returns(reward, done.float(), bootstrap, cont.float(), hp.gamma, hp.lam)
        q_taken = q[: n * t].view(n, t, num_actions).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return q_taken, target, cont

    @staticmethod
    def _extra_steps(batch: TensorDict, every: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps whose next state is not the next row's (episode ends and the last step) ``[N, T]``, and the flat
        positions of the steps whose next state gets a row of its own: those, or ``every`` step (fixed shapes)."""
        extra = batch[keys.EPISODE_END].clone()
        extra[:, -1] = True
        if every:
            return extra, torch.arange(extra.numel(), device=extra.device)
        return extra, extra.flatten().nonzero().squeeze(1)  # once: each boolean-mask read would search again

    @staticmethod
    def _next_rows(seq: torch.Tensor, extra_rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """Values of each step's next state ``[N, T, A]``: row t + 1, or its own row at the flat positions ``at``."""
        nxt = torch.empty_like(seq)
        nxt[:, :-1] = seq[:, 1:]
        return nxt.view(-1, seq.shape[-1]).index_copy_(0, at, extra_rows).view_as(seq)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["sun_target_update"] = self.target_update.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if "sun_target_update" in checkpoint:
            self.target_update.load_state_dict(checkpoint["sun_target_update"])
