"""Critic ensemble of the AdaGoal and DISCOVER baselines, TD3 variant (SPEC §5b "Ensemble baselines").

Paper appendix "GCRL Control": four critics, each with its own target network, trained on different
random batches with TD targets from its own target network; one actor trained against the average
value of all critics. The E critics are one :class:`~sun_lightning.networks.td3.GoalCritic` whose
parameters carry a leading member axis ``[E, ...]`` (their encoders' running statistics shared), so
AdamW and the Polyak update act on every member elementwise; the members are evaluated together in
one ``torch.vmap`` where they share their inputs (selection, the actor's loss).
"""

from __future__ import annotations

from functools import partial

import torch
from tensordict import TensorDictBase
from torch import nn
from torch.func import functional_call

from sun_lightning import keys
from sun_lightning.domains import PositiveInt
from sun_lightning.envs.registry import GoalSpace
from sun_lightning.learners.target import TargetUpdate
from sun_lightning.learners.td3 import TD3SVF
from sun_lightning.networks.ensemble import stack_members
from sun_lightning.networks.td3 import GoalCritic


class EnsembleTD3SVF(TD3SVF):
    """E TD3 critics Q_1..Q_E and one actor (SPEC §5b).

    * :meth:`update` takes E batches stacked ``[E, N]``; member e learns from batch e with
      targets from its own target critic (and the shared target actor).
    * The actor maximizes the members' mean (1/E) Σ_e Q_e(s, π(s, g), g) on member 0's batch.
    * :meth:`goal_values` returns every member's V_e(s, g) = Q_e(s, π(s, g), g), ``[E, B, K]``
      (DISCOVER and AdaGoal score their mean and spread).

    Args:
        goal_space: linked from the ``data`` config's environment by the CLI.
        ensemble_size: number of critics E (4 in the paper).
        **kwargs: the :class:`TD3SVF` hyperparameters, shared by all members.
    """

    def __init__(self, goal_space: GoalSpace | None = None, ensemble_size: PositiveInt = 4, **kwargs) -> None:
        super().__init__(goal_space, **kwargs)
        if ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {ensemble_size}")
        self.ensemble_size = ensemble_size
        self.save_hyperparameters(ignore=["goal_space"])
        hp = self.hparams
        sizes = dict(hidden=hp.hidden, features=hp.features, maxout_width=hp.maxout_width,
                     maxout_pieces=hp.maxout_pieces, head_width=hp.head_width)
        # Independently initialised members, stacked into the critic built by TD3SVF.
        members = [self.critic] + [GoalCritic(*self._encoders(), goal_space.action_dim, **sizes)
                                   for _ in range(ensemble_size - 1)]
        stack_members(self.critic, self.critic_target, members)
        self.critic_target_update = TargetUpdate(self.critic, self.critic_target, hp.critic_tau, hp.target_every)

    @property
    def batches_per_update(self) -> int:
        """One relabelled batch per member."""
        return self.ensemble_size

    def members(self, net: nn.Module, obs: torch.Tensor, action: torch.Tensor, goal: torch.Tensor,
                goal_index: torch.Tensor | None = None) -> torch.Tensor:
        """Every member of the stacked critic ``net`` (online or target) on its own inputs ``[E, ...]``: one
        vmapped call, whose matrix products run batched over the members."""
        def one(params: dict, o: torch.Tensor, a: torch.Tensor, g: torch.Tensor, i: torch.Tensor | None) -> torch.Tensor:
            return functional_call(net, params, (o, a, g, i))

        in_dims = (0, 0, 0, 0, None if goal_index is None else 0)
        return torch.vmap(one, in_dims=in_dims)(dict(net.named_parameters()), obs, action, goal, goal_index)

    def critic_values(self, obs: torch.Tensor, action: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """Every member's Q(s, a, g) on the same inputs, ``[E, ...]``: one vmapped forward."""
        def one(p: dict) -> torch.Tensor:
            return functional_call(self.critic, p, (obs, action, goal))

        return torch.vmap(one)(dict(self.critic.named_parameters()))

    # ---- learning ---------------------------------------------------------------------
    def critic_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """Σ_e of member e's MSE on its own batch against its own target critic; statistics are member averages.

        All members' targets, values and gradients come from batched calls over the member axis."""
        e = self.ensemble_size
        if batch.batch_dims != 2 or batch.batch_size[0] != e:
            raise ValueError(f"EnsembleTD3SVF needs one batch per member stacked as [{e}, N], got {tuple(batch.batch_size)}")
        target, steps = self.td_targets(batch)
        q = self.members(self.critic, batch[keys.OBS], batch[keys.ACTION], batch[keys.GOAL])
        member_loss = (q - target).square().mean(-1)
        return member_loss.sum(), torch.stack([member_loss.detach().mean(), q.detach().mean(), target.mean(), steps])

    def path_bootstraps(self, next_obs: torch.Tensor, goal: torch.Tensor, need: torch.Tensor) -> torch.Tensor:
        """B_j of member e's rows from member e's target critic (and the shared target actor), ``[E, N, H]``."""
        critic = partial(self.members, self.critic_target)
        e, n, h = need.shape
        if self.padded(next_obs.device):
            row = torch.arange(n, device=need.device).repeat_interleave(h).expand(e, n * h)
            values = self.target_values(next_obs.flatten(1, 2), goal, row, critic)
            return torch.where(need, values.view(need.shape), 0.0)
        # Each member's steps that need a bootstrap, laid out [E, L] (L: the most of any member; the
        # shorter members padded with their row 0), so that the members' critics run as one batched call.
        counts = need.flatten(1).sum(1)
        member, row, step = need.nonzero(as_tuple=True)  # member-major
        position = torch.arange(member.numel(), device=member.device) - (torch.cumsum(counts, 0) - counts)[member]
        length = int(counts.max())
        obs = next_obs.new_zeros(e, length, next_obs.shape[-1])
        obs[member, position] = next_obs[member, row, step]
        rows = torch.zeros(e, length, dtype=torch.long, device=need.device)
        rows[member, position] = row
        values = self.target_values(obs, goal, rows, critic)
        bootstrap = torch.zeros(need.shape, dtype=torch.float32, device=need.device)
        return bootstrap.index_put_((member, row, step), values[member, position])

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """−(1/E) Σ_e Q_e(s, π(s, g), g) over member 0's rows."""
        return super().actor_loss(batch[0])
