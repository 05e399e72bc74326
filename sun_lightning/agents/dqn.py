"""The DQN variant of SVF learning for discrete actions (SPEC §5a, paper appendix "Gridworlds and Classic Control")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal

import torch
from tensordict import TensorDict
from torch.nn import functional as F

from sun_lightning import keys
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.losses import q_loss_native, watkins_native
from sun_lightning.losses.td_lambda import double_q_bootstrap, greedy_within, watkins_lambda_returns
from sun_lightning.module import SVFModule
from sun_lightning.networks.encoders import RunningMeanStd, StandardizedRBF
from sun_lightning.networks.q_network import GoalQNetwork
from sun_lightning.networks.rows import QParams
from sun_lightning.optim import ClippedAdamW, polyak_

QFunction = Callable[..., torch.Tensor]
#: The training statistics of an update, in the order of :meth:`DQNSVF.loss_and_stats`'s vector
#: (documented in the README's metrics table).
TRAIN_STATS = ("train/loss/td", "train/q/taken", "train/q/target", "train/trace/continue")


class DQNSVF(SVFModule):
    """Learns Q(s, a, g_s, g_a) with Double DQN, TD(λ) and Watkins's cut traces.

    The reward is 1 and the step terminal when (s, a) matches the goal. Two
    changes to Watkins's Q(λ) from the paper: the bootstrap
    max_a Q(s', a, g) is clipped to ``bootstrap_clip`` and an action counts as
    greedy (trace kept) when its value is within 1 − γ of the max.

    Args:
        goal_space: linked from the DataModule (dimensions, action count).
        gamma: discount γ.
        lam: trace factor λ.
        tau: Polyak coefficient of the target network, applied every update.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clip (applied by the optimizer, :class:`~sun_lightning.optim.ClippedAdamW`).
        huber_delta: Huber loss threshold.
        bootstrap_clip: upper clip of the bootstrap value (V ≤ 1).
        width: hidden width of Q.
        maxout_pieces: pieces of the maxout layer.
        dropout: dropout of the state and goal branches.
        init_std: std of the N(0, std²) weight initialisation.
        encoder: input encoder φ (SPEC §5c): ``identity`` (one-hot gridworlds),
            ``rbf`` (running standardization + RBF layer) or ``auto`` (identity
            where counts are exact, RBF otherwise).
        rbf_centres: RBF tiles per input dimension.
        native_rows: on CPU, run Q (after its encoders) and the TD(λ) targets with the C kernels
            (same maths; see :mod:`sun_lightning.networks.rows` and
            :mod:`sun_lightning.losses.watkins_native`), else PyTorch ops throughout.
    """

    def __init__(
        self,
        goal_space: GoalSpace | None = None,
        gamma: float = 0.99,
        lam: float = 0.95,
        tau: float = 0.001,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        grad_clip: float = 1.0,
        huber_delta: float = 1.0,
        bootstrap_clip: float = 1.0,
        width: int = 64,
        maxout_pieces: int = 4,
        dropout: float = 0.1,
        init_std: float = 0.01,
        encoder: Literal["auto", "identity", "rbf"] = "auto",
        rbf_centres: int = 20,
        native_rows: bool = True,
    ) -> None:
        super().__init__(goal_space)
        if not goal_space.discrete:
            raise ValueError("DQNSVF needs a discrete-action environment")
        if not 0.0 < gamma < 1.0 or not 0.0 <= lam <= 1.0:
            raise ValueError(f"need 0 < gamma < 1 and 0 <= lam <= 1, got gamma={gamma}, lam={lam}")
        self.save_hyperparameters(ignore=["goal_space"])
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
            obs_width, goal_width, goal_space.num_actions, width, maxout_pieces, dropout, init_std, obs_encoder, goal_encoder,
            native_rows,
        )
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        if self.obs_stats is not None:
            # One set of observation statistics, seen by both networks.
            self.q_target.obs_encoder.stats = self.q_target.goal_encoder.stats = self.obs_stats
        self._polyak_pairs: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self._stats: torch.Tensor | None = None  # sums of TRAIN_STATS since the last pop_train_metrics
        self._stat_updates = 0

    def observe(self, obs: torch.Tensor) -> None:
        """Update the running observation statistics with collected frames (SPEC §5c)."""
        if self.obs_stats is not None:
            self.obs_stats.update(obs.to(self.obs_stats.mean.device))

    # ---- values for data collection -------------------------------------------------
    @torch.no_grad()
    def action_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        return self.q(obs, goal, goal_action=goal_action)  # [B, A]

    def goal_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        return self.goal_and_action_values(obs, goal, goal_action)[0]

    @torch.no_grad()
    def goal_and_action_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s, g) = max_a Q(s, a, g_s, g_a) ``[B, K]`` and Q(s, ·, g_s, g_a) ``[B, K, |A|]`` (SPEC §3).

        With ``goal_keys``, each (state, distinct goal projection) is one row of Q, whose |A| × |A|
        outputs serve all of that goal's candidates whatever their goal actions: candidates drawn from
        a gridworld's replay storage repeat tiles, so selection evaluates ~4x fewer rows.
        """
        b, k = goal.shape[:2]
        if goal_keys is None and k == 1:  # one goal per state (the adaptive check)
            q = self.q(obs, goal.flatten(0, 1), goal_action=goal_action.flatten()).unsqueeze(1)
            return q.amax(-1), q
        if goal_keys is None:
            # Each state's branch runs once for its K candidates.
            state_index = torch.arange(b, device=obs.device).repeat_interleave(k)
            q = self.q(obs, goal.flatten(0, 1), obs_index=state_index, goal_action=goal_action.flatten())
            q = q.view(b, k, -1)
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
        # AdamW with the grad-norm clip and the target's Polyak step inside its step: one C pass for
        # all three on CPU (sun_lightning.optim).
        return ClippedAdamW(self.q.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay,
                            max_grad_norm=self.hparams.grad_clip, polyak=self.polyak_targets())

    def polyak_targets(self) -> tuple[list[torch.Tensor], float]:
        """The target network's parameters (in the online network's parameter order) and τ, for the optimizer."""
        return list(self.q_target.parameters()), self.hparams.tau

    def loss(self, batch: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Huber loss of Q(s_t, a_t, g_t) against Watkins TD(λ) targets over ``[N, T]`` rows, and its
        statistics by name (:data:`TRAIN_STATS`)."""
        loss, stats = self.loss_and_stats(batch)
        return loss, dict(zip(TRAIN_STATS, stats.unbind()))

    def loss_and_stats(self, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`loss` with its statistics as one detached vector ``[len(TRAIN_STATS)]``.

        On CPU with the C kernels the whole loss is one autograd node, computed with its gradient in one C call
        (:mod:`~sun_lightning.losses.q_loss_native`); elsewhere :meth:`td_targets` and ``F.huber_loss``
        (the reference; the same maths).
        """
        hp = self.hparams
        if hp.native_rows:
            states, goals = batch[keys.STATES], batch[keys.GOALS]
            x_s, x_g = self.q.encode(states, goals)
            if self.q.uses_native_rows(x_s, x_g) and batch[keys.ACTION].device.type == "cpu":
                with torch.no_grad():
                    xt_s, xt_g = self.q_target.encode(states, goals)
                return self.c_loss(batch, x_s, x_g, xt_s, xt_g, self.q.native_params(), self.q_target.native_params())
        return self.td_loss(batch)

    def c_loss(self, batch: TensorDict, x_s: torch.Tensor, x_g: torch.Tensor, xt_s: torch.Tensor, xt_g: torch.Tensor,
               params: QParams, target_params: QParams) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`loss_and_stats` of a critic with weights ``params`` (encoded tables ``x_s``, ``x_g``) and target
        weights ``target_params`` (tables ``xt_s``, ``xt_g``), as one C call (:func:`q_loss_native.q_loss`)."""
        hp = self.hparams
        return q_loss_native.q_loss(x_s, x_g, xt_s, xt_g, params, target_params, self.q.native_config(True), batch,
                                    hp.gamma, hp.lam, hp.bootstrap_clip, 1.0 - hp.gamma, hp.huber_delta)

    def td_loss(self, batch: TensorDict, **td_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`loss_and_stats` from :meth:`td_targets` (given ``td_kwargs``) and ``F.huber_loss``: the reference,
        and the path off the C kernels."""
        q_taken, target, cont = self.td_targets(batch, **td_kwargs)
        loss = F.huber_loss(q_taken, target, delta=self.hparams.huber_delta)
        return loss, torch.stack([loss.detach(), q_taken.detach().mean(), target.mean(), cont.float().mean()])

    def td_targets(
        self, batch: TensorDict, q_fn: QFunction | None = None, q_target_fn: QFunction | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q(s_t, a_t, g_t) (with grad), its TD(λ) target and the trace-continuation mask, each ``[N, T]``.

        Batch rows ``[N, T]`` (see ``SegmentedHindsightSampler.sample``) are runs of consecutive steps sharing the goal of
        their segment (SPEC §5a): reward 1 and terminal where (s_t, a_t) reaches
        the goal; episode ends cut traces.

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
        # The next state of step t is row t + 1 (same goal unless t ended its
        # segment, where the bootstrap is unused), except at episode ends and at
        # the last step: those next states get rows of their own.
        native = hp.native_rows and watkins_native.applies(batch[keys.STATES])  # CPU float32 tables
        entries = (batch[keys.STATE_INDEX], batch[keys.NEXT_STATE_INDEX], batch[keys.GOAL_INDEX], goal_action,
                   batch[keys.EPISODE_END])
        if native:  # the same rows from one C pass
            state_index, goal_index, goal_action_rows = watkins_native.q_rows(*entries)
        else:
            extra, at = self._extra_steps(batch)
            # one gather for the three row entries: [state, goal, goal action] then their next-state rows
            steps = torch.stack([batch[keys.STATE_INDEX], batch[keys.GOAL_INDEX], goal_action]).flatten(1)
            nexts = torch.stack([batch[keys.NEXT_STATE_INDEX], batch[keys.GOAL_INDEX], goal_action]).flatten(1)
            state_index, goal_index, goal_action_rows = torch.cat([steps, nexts.index_select(1, at)], dim=1)
        states, goals = batch[keys.STATES], batch[keys.GOALS]
        index = dict(obs_index=state_index, goal_index=goal_index, goal_action=goal_action_rows)  # Q(·, ·, g_s, g_a)
        q = q_fn(states, goals, dropout=True, **index)
        with torch.no_grad():
            q_target = q_target_fn(states, goals, **index)
        q_taken = q[: n * t].view(n, t, num_actions).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        if native and watkins_native.applies(q):
            target, cont = watkins_native.watkins_targets(
                q.detach(), q_target, action, reward, batch[keys.TERMINATED], batch[keys.EPISODE_END], hp.gamma,
                hp.lam, hp.bootstrap_clip, 1.0 - hp.gamma)
            return q_taken, target, cont
        with torch.no_grad():
            extra, at = self._extra_steps(batch)
            q_seq = q[: n * t].detach().view(n, t, num_actions)
            online_next = self._next_rows(q_seq, q[n * t :].detach(), at)
            target_next = self._next_rows(q_target[: n * t].view(n, t, num_actions), q_target[n * t :], at)
            bootstrap = double_q_bootstrap(online_next, target_next, hp.bootstrap_clip)
            next_action = torch.roll(action, -1, dims=1)
            cont = greedy_within(online_next, next_action, 1.0 - hp.gamma) & ~extra
            done = (reward > 0) | batch[keys.TERMINATED]
            target = watkins_lambda_returns(reward, done.float(), bootstrap, cont.float(), hp.gamma, hp.lam)
        return q_taken, target, cont

    @staticmethod
    def _extra_steps(batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps whose next state has a row of its own (episode ends and the last step) ``[N, T]``, and their flat positions."""
        extra = batch[keys.EPISODE_END].clone()
        extra[:, -1] = True
        return extra, extra.flatten().nonzero().squeeze(1)  # once: each boolean-mask read would search again

    @staticmethod
    def _next_rows(seq: torch.Tensor, extra_rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """Values of each step's next state ``[N, T, A]``: row t + 1, or its own row at the flat positions ``at``."""
        nxt = torch.empty_like(seq)
        nxt[:, :-1] = seq[:, 1:]
        return nxt.view(-1, seq.shape[-1]).index_copy_(0, at, extra_rows).view_as(seq)

    def training_step(self, batches: list[TensorDict], batch_idx: int) -> None:
        """The updates of one collected vector step: one per batch (``ExplorationDataModule.stream``)."""
        for batch in batches:
            self.update(batch)

    def update(self, batch: TensorDict) -> None:
        """One learner update: loss, backward, clipped AdamW step and the target's Polyak step (both in
        :class:`ClippedAdamW`'s step, unless a subclass's optimizer leaves the Polyak step to :meth:`polyak_update`)."""
        loss, stats = self.loss_and_stats(batch)
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        opt.step()
        if getattr(opt.optimizer, "polyak", None) is None:
            self.polyak_update()
        self.updates += 1
        self._accumulate(stats)

    @torch.no_grad()
    def polyak_update(self) -> None:
        """target ← (1 − τ) target + τ online."""
        pairs = self._polyak_pairs
        if pairs is None:  # listing both networks' parameters cost more than the lerp itself
            pairs = self._polyak_pairs = (list(self.q_target.parameters()), list(self.q.parameters()))
        polyak_(*pairs, self.hparams.tau)

    def _accumulate(self, stats: torch.Tensor) -> None:
        self._stats = stats.clone() if self._stats is None else self._stats.add_(stats)
        self._stat_updates += 1

    def pop_train_metrics(self) -> dict[str, float]:
        if not self._stat_updates:
            return {}
        out = {name: value / self._stat_updates for name, value in zip(TRAIN_STATS, self._stats.tolist())}
        out["train/updates/total"] = float(self.updates)
        self._stats, self._stat_updates = None, 0
        return out
