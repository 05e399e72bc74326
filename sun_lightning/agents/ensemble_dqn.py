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
Polyak update of :class:`~sun_lightning.agents.dqn.DQNSVF` act on each member
exactly as on a single critic; only gradient clipping needs a per-member norm.
"""

from __future__ import annotations

from functools import partial

import torch
from tensordict import TensorDict
from torch import nn
from torch.func import functional_call

from sun_lightning import keys
from sun_lightning.agents.dqn import DQNSVF, QFunction
from sun_lightning.envs.registry import GoalSpace


class EnsembleDQNSVF(DQNSVF):
    """E independent DQN critics Q_1..Q_E of Q(s, a, g_s, g_a), trained side by side.

    * Each member learns from its own relabelled batch: :meth:`training_step`
      takes a TensorDict ``[E, N, T]`` whose slice ``e`` is member e's batch
      (:attr:`batches_per_update` tells the DataModule how many to stack).
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
        goal_space: linked from the DataModule.
        ensemble_size: number of critics E (4 in the paper).
        **kwargs: the :class:`DQNSVF` hyperparameters (γ, λ, τ, lr, …), shared by all members.
    """

    def __init__(self, goal_space: GoalSpace | None = None, ensemble_size: int = 4, **kwargs) -> None:
        super().__init__(goal_space, **kwargs)
        if ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {ensemble_size}")
        self.ensemble_size = ensemble_size
        self.save_hyperparameters(ignore=["goal_space"])
        # Independently initialised members, each built exactly as DQNSVF
        # builds its network (encoders included); the spread at initialisation
        # is the only disagreement on goals that no batch has covered yet.
        members = [self.q] + [DQNSVF(goal_space, **kwargs).q for _ in range(ensemble_size - 1)]
        for name, _ in list(self.q.named_parameters()):
            stacked = torch.stack([member.get_parameter(name).detach() for member in members])
            _replace_parameter(self.q, name, nn.Parameter(stacked))
            # Each member's target starts as a copy of that member. Stacking in
            # place keeps what DQNSVF set up on its target (shared encoder statistics).
            _replace_parameter(self.q_target, name, nn.Parameter(stacked.clone(), requires_grad=False))

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
        params: dict[str, torch.Tensor] | None = None,
        shared_inputs: bool = False,
    ) -> torch.Tensor:
        """Q of every member, ``[E, ..., |A|, |A|]``, in one vmapped forward.

        Args:
            net: ``self.q`` or ``self.q_target`` (stacked parameters).
            obs, goal: ``[E, ..., D]`` (one input per member) or, with
                ``shared_inputs``, ``[..., D]`` seen by all members.
            dropout: apply the branches' dropout (learning updates only).
            params: stacked parameters to use instead of ``net``'s own (e.g.
                target members in a drawn order).
        """
        params = dict(net.named_parameters()) if params is None else params

        def member(p: dict, o: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            return functional_call(net, p, (o, g), {"dropout": dropout})

        in_dim = None if shared_inputs else 0
        # "different": every member draws its own dropout mask.
        return torch.vmap(member, in_dims=(0, in_dim, in_dim), randomness="different")(params, obs, goal)

    # ---- values for data collection -------------------------------------------------
    @torch.no_grad()
    def action_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """min_i Q_i(s, a, g_s, g_a) for every action a, ``[B, |A|]``: the ensemble acts pessimistically (paper appendix)."""
        q = self.members_forward(self.q, obs, goal, shared_inputs=True)  # [E, B, A, A]
        return _at_goal_action(q, goal_action).amin(0)

    @torch.no_grad()
    def goal_values(self, obs: torch.Tensor, goal: torch.Tensor, goal_action: torch.Tensor | None) -> torch.Tensor:
        """V_i(s, g) = max_a Q_i(s, a, g_s, g_a) of every member, ``[E, B, K]`` (SPEC §3)."""
        b, k = goal.shape[:2]
        q = self.members_forward(self.q, obs.unsqueeze(1).expand(b, k, obs.shape[-1]), goal, shared_inputs=True)
        return _at_goal_action(q, goal_action).amax(-1)

    # ---- learning ---------------------------------------------------------------------
    def td_targets(
        self,
        batch: TensorDict,
        q_fn: QFunction | None = None,
        q_target_fn: QFunction | None = None,
        target_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-member Q(s_t, a_t, g_t), TD(λ) target and trace mask, each ``[E, N, T]``, for a batch ``[E, N, T]``.

        Member e's rows use its online network and target network
        ``target_index[e]`` (drawn uniformly per member when None). The
        computation is :meth:`DQNSVF.td_targets` on the flattened ``[E·N, T]``
        batch with networks that route every row to its member. With explicit
        ``q_fn``/``q_target_fn`` this is the plain single-critic method.
        """
        if q_fn is not None or q_target_fn is not None:
            return super().td_targets(batch, q_fn, q_target_fn)
        e = self.ensemble_size
        if batch.batch_dims != 3 or batch.batch_size[0] != e:
            raise ValueError(
                f"EnsembleDQNSVF needs one batch per member stacked as [{e}, N, T], got {tuple(batch.batch_size)}"
            )
        if target_index is None:
            target_index = self.draw_target_index(batch[keys.ACTION].device)
        rows, length = _member_rows(batch)
        online = dict(self.q.named_parameters())
        target = {name: p[target_index] for name, p in self.q_target.named_parameters()}
        route = partial(self._routed_forward, rows=rows, length=length)
        out = super().td_targets(
            batch.flatten(0, 1), q_fn=partial(route, self.q, online), q_target_fn=partial(route, self.q_target, target)
        )
        return tuple(x.view(*batch.batch_size) for x in out)

    def draw_target_index(self, device: torch.device | None = None) -> torch.Tensor:
        """The target network each member bootstraps from in this update, ``[E]``, uniform and independent."""
        return torch.randint(self.ensemble_size, (self.ensemble_size,), device=device)

    def _routed_forward(
        self,
        net: nn.Module,
        params: dict[str, torch.Tensor],
        obs: torch.Tensor,
        goal: torch.Tensor,
        dropout: bool = False,
        *,
        rows: torch.Tensor,
        length: int,
    ) -> torch.Tensor:
        """Evaluates row r of ``obs``/``goal`` with the member owning it (see :func:`_member_rows`), ``[R, |A|, |A|]``."""
        if obs.shape[0] != rows.numel():
            raise RuntimeError("DQNSVF.td_targets changed its row layout; update _member_rows")
        e = self.ensemble_size
        # Pad every member to the same number of rows so that one vmapped forward serves all.
        padded_obs = obs.new_zeros(e * length, obs.shape[-1])
        padded_goal = goal.new_zeros(e * length, goal.shape[-1])
        padded_obs[rows], padded_goal[rows] = obs, goal
        q = self.members_forward(net, padded_obs.view(e, length, -1), padded_goal.view(e, length, -1), dropout, params)
        return q.flatten(0, 1)[rows]

    def loss(self, batch: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Σ_e of member e's mean Huber loss on its own batch; statistics are member averages."""
        loss, stats = super().loss(batch)
        # DQNSVF.loss averages over all E·N·T rows, i.e. (1/E) Σ_e L_e: scaled
        # back, each member's gradient is exactly that of its own loss.
        return loss * self.ensemble_size, stats

    @torch.no_grad()
    def clip_gradients(
        self, optimizer, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Gradient-norm clipping of each member separately (called by :meth:`DQNSVF.training_step`).

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


def _replace_parameter(net: nn.Module, name: str, value: nn.Parameter) -> None:
    """Swaps the parameter ``name`` (dotted path) of ``net`` for ``value``."""
    owner, _, attr = name.rpartition(".")
    setattr(net.get_submodule(owner), attr, value)


def _at_goal_action(q: torch.Tensor, goal_action: torch.Tensor) -> torch.Tensor:
    """Q(·, a, g_s, g_a) for every a: ``q [E, ..., A, A]`` indexed by ``goal_action [...]`` → ``[E, ..., A]``."""
    index = goal_action.long()[..., None, None].expand(*q.shape[:-1], 1)
    return q.gather(-1, index).squeeze(-1)


def _member_rows(batch: TensorDict) -> tuple[torch.Tensor, int]:
    """Where each input row of ``DQNSVF.td_targets`` on ``batch.flatten(0, 1)`` sits in a padded ``[E, L]`` layout.

    ``td_targets`` evaluates the E·N·T steps in order (member-major after
    flattening), then one extra next-state row per episode end and per run's
    last step, in row-major mask order, so also grouped by member. Returns the
    flat position ``e · L + j`` of every row and the padded length L.
    """
    e, n, t = batch.batch_size
    extra = batch[keys.EPISODE_END].clone()
    extra[..., -1] = True  # mirrors td_targets: these steps get next-state rows of their own
    per_member = extra.flatten(1).sum(1)
    length = n * t + int(per_member.max())
    device = per_member.device
    member = torch.arange(e, device=device)
    main = (member[:, None] * length + torch.arange(n * t, device=device)).flatten()
    owner = member.repeat_interleave(per_member)
    rank = torch.arange(owner.numel(), device=device) - (per_member.cumsum(0) - per_member)[owner]
    return torch.cat([main, owner * length + n * t + rank]), length
