"""Critic ensemble of the AdaGoal and DISCOVER baselines, DQN variant (SPEC §5a "Ensemble baselines").

Paper appendix "Gridworlds and Classic Control": four critics, each with its
own target network, trained on different random batches, with TD targets
from one randomly chosen target network; the policy is ε-greedy on
argmax_a min_i Q_i(s, a, g).

The E members are one :class:`~sun_lightning.networks.q_network.GoalQNetwork`
whose parameters carry a leading member axis ``[E, ...]``. A single
``torch.vmap`` over :func:`torch.func.functional_call` evaluates all members in
one batched forward (dropout drawn independently per member). Because the
stacked parameters are ordinary leaf tensors, AdamW (elementwise) and the
Polyak update of :class:`~sun_lightning.learners.dqn.DQNSVF` act on each member
exactly as on a single critic; only gradient clipping needs a per-member norm.
"""

from __future__ import annotations

from functools import partial

import torch
from tensordict import TensorDict
from torch import nn
from torch.func import functional_call

from sun_lightning import keys
from sun_lightning.domains import PositiveInt
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.learners.dqn import DQNSVF
from sun_lightning.learners.target import TargetUpdate
from sun_lightning.native import q_loss as native_loss
from sun_lightning.networks.ensemble import stack_members


class EnsembleDQNSVF(DQNSVF):
    """E independent DQN critics Q_1..Q_E of Q(s, a, g_s, g_a), trained side by side.

    * Each member learns from its own relabelled batch: :meth:`update`
      takes a TensorDict ``[E, N, T]`` whose slice ``e`` is member e's batch
      (:attr:`batches_per_update` tells the exploration loop how many to stack).
    * The TD(λ) targets are :meth:`DQNSVF.td_targets` with the member's online
      network and the target network of a member drawn uniformly at random,
      one draw per member per update.
    * The loss is the sum of the members' own mean Huber losses and gradients
      are norm-clipped per member, so a member's gradient step never sees
      another member's batch; members meet only through the target draw (a
      target network tracks its own member), as in the paper.
    * ``goal_values`` returns ``[E, B, K]`` (for DISCOVER / AdaGoal);
      ``action_values`` the member minimum min_i Q_i(s, a, g).

    Args:
        goal_space: linked from the ``data`` config's environment by the CLI.
        ensemble_size: number of critics E (4 in the paper).
        **kwargs: the :class:`DQNSVF` hyperparameters (γ, λ, τ, lr, …), shared by all members.
    """

    def __init__(self, goal_space: GoalSpace | None = None, ensemble_size: PositiveInt = 4, **kwargs) -> None:
        super().__init__(goal_space, **kwargs)
        if ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {ensemble_size}")
        self.ensemble_size = ensemble_size
        self.save_hyperparameters(ignore=["goal_space"])
        # Independently initialised members, each built exactly as DQNSVF
        # builds its network (encoders included); the spread at initialisation
        # is the only disagreement on goals that no batch has covered yet.
        members = [self.q] + [DQNSVF(goal_space, **kwargs).q for _ in range(ensemble_size - 1)]
        # Each member's target starts as a copy of that member; stacking in place keeps what DQNSVF
        # set up on its target (shared encoder statistics).
        stack_members(self.q, self.q_target, members)
        # Polyak over the stacked parameters is every member's own step (elementwise).
        self.target_update = TargetUpdate(self.q, self.q_target, self.hparams.tau)

    @property
    def batches_per_update(self) -> int:
        """Relabelled batches one update consumes, stacked along a leading axis: one per member."""
        return self.ensemble_size

    # ---- batched evaluation of the members ---------------------------------------------
    def members_forward(
        self,
        net: nn.Module,
        obs: torch.Tensor,
        goal: torch.Tensor,
        dropout: bool = False,
        params: dict | None = None,
        shared_inputs: bool = False,
        obs_index: torch.Tensor | None = None,
        goal_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q of every member, ``[E, ..., |A|, |A|]``: one vmapped forward.

        Args:
            net: ``self.q`` or ``self.q_target`` (stacked parameters).
            obs, goal: ``[E, ..., D]`` (one input per member) or, with
                ``shared_inputs``, ``[..., D]`` seen by all members.
            dropout: apply the branches' dropout (learning updates only).
            params: stacked parameters to use instead of ``net``'s own (e.g.
                target members in a drawn order).
            obs_index, goal_index: per-member rows ``[E, L]`` into per-member
                tables ``obs [E, U_s, D]``, ``goal [E, U_g, G]`` (see ``GoalQNetwork.forward``).
        """
        params = dict(net.named_parameters()) if params is None else params
        in_dim = None if shared_inputs else 0
        # "different": every member draws its own dropout mask.
        if obs_index is None:

            def member(p: dict, o: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
                return functional_call(net, p, (o, g), {"dropout": dropout})

            return torch.vmap(member, in_dims=(0, in_dim, in_dim), randomness="different")(params, obs, goal)

        # Three steps, as GoalQNetwork.forward takes them: the tables (vmapped), the rows' gather over all
        # members at once, the rows (vmapped). vmap's batching rule for an index_select whose input and index
        # are both batched is several times slower than one plain gather, forward and backward.
        method = _Method(net)
        wrapped = {f"net.{name}": p for name, p in params.items()}

        def member_tables(p: dict, o: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return functional_call(method, p, ("tables", o, g, dropout))

        f_s, pre_s, f_g, pre_g = torch.vmap(member_tables, in_dims=(0, in_dim, in_dim), randomness="different")(
            wrapped, obs, goal)
        f_s, pre_s = _member_rows(f_s, obs_index), _member_rows(pre_s, obs_index)
        f_g, pre_g = _member_rows(f_g, goal_index), _member_rows(pre_g, goal_index)

        def member_q(p: dict, *features: torch.Tensor) -> torch.Tensor:
            return functional_call(method, p, ("rows", *features))

        return torch.vmap(member_q)(wrapped, f_s, pre_s, f_g, pre_g)

    # ---- values for data collection -------------------------------------------------
    @torch.no_grad()
    def action_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """min_i Q_i(s, a, g_s, g_a) for every action a, ``[B, |A|]``: the ensemble acts pessimistically (paper appendix)."""
        with self.inference_context():
            q = self.members_forward(self.q, obs, goal, shared_inputs=True)  # [E, B, A, A]
        return _at_goal_action(q, goal_action).amin(0)

    @torch.no_grad()
    def goal_values(
        self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None = None,
        goal_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V_i(s, g) = max_a Q_i(s, a, g_s, g_a) of every member ``[E, B, K]`` (SPEC §3), and the pessimistic
        acting values min_i Q_i(s, ·, g_s, g_a) ``[B, K, |A|]`` (``goal_keys`` unused)."""
        b, k = goal.shape[:2]
        with self.inference_context():
            q = self.members_forward(self.q, obs.unsqueeze(1).expand(b, k, obs.shape[-1]), goal, shared_inputs=True)
        q = _at_goal_action(q, goal_action)  # [E, B, K, A]
        return q.amax(-1), q.amin(0)

    # ---- learning ---------------------------------------------------------------------
    def td_targets(
        self, batch: TensorDict, q_fn=None, q_target_fn=None, target_index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-member Q(s_t, a_t, g_t), TD(λ) target and trace mask, each ``[E, N, T]``, for batches stacked ``[E]``.

        Member e's rows use its online network and target network
        ``target_index[e]`` (drawn uniformly per member when None). The
        computation is :meth:`DQNSVF.td_targets` on the members' batches merged
        into one (tables concatenated, indices offset), with networks that send
        every row to the member owning its table entries. With explicit
        ``q_fn``/``q_target_fn`` this is the plain single-critic method.
        """
        if q_fn is not None or q_target_fn is not None:
            return super().td_targets(batch, q_fn, q_target_fn)
        e = self.ensemble_size
        if batch.batch_dims != 1 or batch.batch_size[0] != e:
            raise ValueError(f"EnsembleDQNSVF needs one batch per member stacked as [{e}], got {tuple(batch.batch_size)}")
        if target_index is None:
            target_index = self.draw_target_index(batch[keys.ACTION].device)
        sizes = batch[keys.STATES].shape[1], batch[keys.GOALS].shape[1]
        online = dict(self.q.named_parameters())
        target = {name: p[target_index] for name, p in self.q_target.named_parameters()}
        route = partial(self._routed_forward, sizes=sizes)
        out = super().td_targets(
            _merge_members(batch), q_fn=partial(route, self.q, online), q_target_fn=partial(route, self.q_target, target)
        )
        return tuple(x.view(e, -1, x.shape[-1]) for x in out)

    def draw_target_index(self, device: torch.device | None = None) -> torch.Tensor:
        """The target network each member bootstraps from in this update, ``[E]``, uniform and independent."""
        return torch.randint(self.ensemble_size, (self.ensemble_size,), device=device)

    def _routed_forward(
        self,
        net: nn.Module,
        params: dict,
        obs: torch.Tensor,
        goal: torch.Tensor,
        dropout: bool = False,
        obs_index: torch.Tensor | None = None,
        goal_index: torch.Tensor | None = None,
        goal_action: torch.Tensor | None = None,
        *,
        sizes: tuple[int, int],
    ) -> torch.Tensor:
        """Evaluates each row with the member owning its table entries, in one vmapped forward: ``[R, |A|, |A|]``,
        or ``[R, |A|]`` at ``goal_action``."""
        e, (us, ug) = self.ensemble_size, sizes
        member = torch.div(obs_index, us, rounding_mode="floor")
        counts = torch.bincount(member, minlength=e)
        # Under a captured update every member has the same rows (each step's next state its own row): the
        # length is known without reading the counts back.
        length = obs_index.numel() // e if self._graphs is not None else int(counts.max())
        order = torch.argsort(member, stable=True)
        owner = member[order]
        # Rows grouped by member, padded to one length so that one vmap serves all.
        slot = owner * length + torch.arange(order.numel(), device=order.device) - (counts.cumsum(0) - counts)[owner]
        padded_obs = obs_index.new_zeros(e * length)
        padded_goal = goal_index.new_zeros(e * length)
        padded_obs[slot], padded_goal[slot] = obs_index[order] - owner * us, goal_index[order] - owner * ug
        q = self.members_forward(
            net, obs.view(e, us, -1), goal.view(e, ug, -1), dropout, params,
            obs_index=padded_obs.view(e, length), goal_index=padded_goal.view(e, length),
        )
        out = q.new_empty(obs_index.numel(), *q.shape[2:])
        out[order] = q.flatten(0, 1)[slot]
        return out if goal_action is None else _at_goal_action(out, goal_action)

    def loss_and_stats(
        self, batch: TensorDict, target_index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Σ_e of member e's mean Huber loss on its own batch; statistics are member averages.

        Member e bootstraps from target network ``target_index[e]`` (drawn uniformly when None), through
        :meth:`td_targets` over the merged batches.
        """
        if batch.batch_dims != 1 or batch.batch_size[0] != self.ensemble_size:
            raise ValueError(f"EnsembleDQNSVF needs one batch per member stacked as [{self.ensemble_size}], got "
                             f"{tuple(batch.batch_size)}")
        if target_index is None:
            target_index = self.draw_target_index(batch[keys.ACTION].device)
        if self._native(batch):
            return self._native_members(batch, target_index)
        loss, stats = super().loss_and_stats(batch, target_index=target_index)
        # F.huber_loss averages over all E·N·T rows, i.e. (1/E) Σ_e L_e: scaled back, each member's
        # gradient is exactly that of its own loss.
        return loss * self.ensemble_size, stats

    def _native_members(self, batch: TensorDict, target_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss on the CPU: each member's through the single critic's C kernel, on its own batch with its
        slice of the stacked weights (the gradient lands in that slice) and target network ``target_index[e]``'s
        slice. The members' encoders run in one vmapped call each for the online and the drawn target networks."""
        hp, e = self.hparams, self.ensemble_size
        states, goals = batch[keys.STATES], batch[keys.GOALS]
        online = dict(self.q.named_parameters())
        drawn = {name: p[target_index] for name, p in self.q_target.named_parameters()}
        x_s, x_g = self._members_encode(self.q, online, states, goals)
        with torch.no_grad():
            xt_s, xt_g = self._members_encode(self.q_target, drawn, states, goals)
        params, targets = native_loss.params_of(self.q), native_loss.params_of(self.q_target)
        drawn_index = target_index.tolist()
        losses, stats = [], []
        for m in range(e):
            loss, stat = native_loss.table_q_loss(
                (x_s[m], x_g[m]), (xt_s[m], xt_g[m]), native_loss.QParams(*(w[m] for w in params)),
                native_loss.QParams(*(w[drawn_index[m]] for w in targets)), native_loss.config_of(self.q, True),
                batch[m], hp.gamma, hp.lam, hp.bootstrap_clip, 1.0 - hp.gamma, hp.huber_delta)
            losses.append(loss)
            stats.append(stat)
        return torch.stack(losses).sum(), torch.stack(stats).mean(0)

    def _members_encode(self, net: nn.Module, params: dict, states: torch.Tensor,
                        goals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """φ_e(s), φ_e(g_s) of every member's own tables ``[E, U, ...]``: one vmapped call."""
        wrapped = {f"net.{name}": p for name, p in params.items()}
        method = _Method(net)

        def member(p: dict, o: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return functional_call(method, p, ("encode", o, g))

        return torch.vmap(member)(wrapped, states, goals)

    @torch.no_grad()
    def clip_gradients(
        self, optimizer, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Gradient-norm clipping of each member separately (called by :meth:`DQNSVF.update`).

        A global norm over the stacked parameters would couple the members:
        one member's large gradient would shrink every member's step. Same rule
        as ``torch.nn.utils.clip_grad_norm_``, per member. fp32 only (no
        precision-plugin unscaling).
        """
        if gradient_clip_val is None:
            return
        if gradient_clip_algorithm not in (None, "norm"):
            raise ValueError(f"EnsembleDQNSVF clips gradient norms only, got {gradient_clip_algorithm!r}")
        grads = [p.grad for p in self.q.parameters() if p.grad is not None]
        if not grads:
            return
        norm = torch.stack([g.flatten(1).square().sum(1) for g in grads]).sum(0).sqrt()  # [E]
        coef = (gradient_clip_val / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))


class _Method(nn.Module):
    """Calls one method of ``net`` by name, so that :func:`torch.func.functional_call` can run methods other
    than ``forward`` with substituted parameters (named ``net.<name>``)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, name: str, *args):
        return getattr(self.net, name)(*args)


def _member_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Member e's rows ``index[e]`` of its own table ``table[e]``: ``[E, U, ...]`` and ``[E, L]`` → ``[E, L, ...]``,
    one gather over the members' tables laid end to end."""
    e, u = table.shape[:2]
    offset = torch.arange(e, device=index.device).unsqueeze(1) * u
    return table.flatten(0, 1).index_select(0, (index + offset).flatten()).unflatten(0, (e, index.shape[1]))


def _at_goal_action(q: torch.Tensor, goal_action: torch.Tensor) -> torch.Tensor:
    """Q(·, a, g_s, g_a) for every a: ``q [E, ..., A, A]`` indexed by ``goal_action [...]`` → ``[E, ..., A]``."""
    index = goal_action.long()[..., None, None].expand(*q.shape[:-1], 1)
    return q.gather(-1, index).squeeze(-1)


def _merge_members(batch: TensorDict) -> TensorDict:
    """One batch from E member batches stacked ``[E]``: tables concatenated, indices offset into them."""
    e, us, ug = batch.batch_size[0], batch[keys.STATES].shape[1], batch[keys.GOALS].shape[1]
    member = torch.arange(e, device=batch[keys.ACTION].device).view(e, 1, 1)
    merged = batch.exclude(keys.STATES, keys.GOALS, keys.STATE_INDEX, keys.NEXT_STATE_INDEX, keys.GOAL_INDEX).apply(
        lambda x: x.flatten(0, 1), batch_size=[]
    )
    merged[keys.STATES] = batch[keys.STATES].flatten(0, 1)
    merged[keys.GOALS] = batch[keys.GOALS].flatten(0, 1)
    merged[keys.STATE_INDEX] = (batch[keys.STATE_INDEX] + member * us).flatten(0, 1)
    merged[keys.NEXT_STATE_INDEX] = (batch[keys.NEXT_STATE_INDEX] + member * us).flatten(0, 1)
    merged[keys.GOAL_INDEX] = (batch[keys.GOAL_INDEX] + member * ug).flatten(0, 1)
    return merged
