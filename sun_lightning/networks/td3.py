"""The TD3 variant's critic Q(s, a, g_s) and actor π(s, g_s) (SPEC §5b, paper figure "Architecture of V and π").

Both networks are one two-branch shape: a first branch (the state, with the action for the critic)
and a goal branch, each Linear 256 → LayerNorm → LeakyReLU → Linear 64; the fusion
concat(f_1, f_g, f_1 ⊙ f_g); Maxout (4 × Linear 1024); LayerNorm → LeakyReLU → Linear 256 →
LeakyReLU → Linear out. The critic's output goes through a softplus (V ≥ 0), the actor's through a
tanh (actions in [−1, 1]). The two networks share nothing; each has its own encoders (SPEC §5c).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sun_lightning.networks.q_network import Maxout


def branch(in_features: int, hidden: int = 256, out_features: int = 64) -> nn.Sequential:
    """Linear → LayerNorm → LeakyReLU → Linear: one input branch of SPEC §5b."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.LayerNorm(hidden), nn.LeakyReLU(),
                         nn.Linear(hidden, out_features))


def rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[..., index[...], :]``: rows ``index`` ``[L]`` (or ``[B, L]``) of ``table`` ``[R, C]`` (``[B, R, C]``)."""
    if index.dim() == 1 and table.dim() == 2:
        return F.embedding(index, table)  # the fastest row gather on CPU (bf16 index_select is not vectorized)
    if index.dim() == 1:
        return table.index_select(-2, index)
    return table.gather(-2, index.unsqueeze(-1).expand(*index.shape, table.shape[-1]))


class TwoBranchNet(nn.Module):
    """``head(maxout(concat(f_1, f_g, f_1 ⊙ f_g)))`` with ``f_1 = branch(x_1)``, ``f_g = branch(x_g)``.

    Args:
        first_features: input size of the first branch (encoded state, and the action for the critic).
        goal_features: input size of the goal branch (encoded goal).
        out_features: output size.
        hidden: branch hidden width (256).
        features: branch output width (64).
        maxout_width: maxout units (1024).
        maxout_pieces: maxout pieces (4).
        head_width: the head's hidden width (256).
    """

    def __init__(self, first_features: int, goal_features: int, out_features: int, hidden: int = 256,
                 features: int = 64, maxout_width: int = 1024, maxout_pieces: int = 4, head_width: int = 256) -> None:
        super().__init__()
        self.first = branch(first_features, hidden, features)
        self.goal = branch(goal_features, hidden, features)
        self.maxout = Maxout(3 * features, maxout_width, maxout_pieces)
        self.head = nn.Sequential(nn.LayerNorm(maxout_width), nn.LeakyReLU(), nn.Linear(maxout_width, head_width),
                                  nn.LeakyReLU(), nn.Linear(head_width, out_features))

    def forward(self, x_1: torch.Tensor, x_g: torch.Tensor, goal_index: torch.Tensor | None = None) -> torch.Tensor:
        """``[..., out_features]`` of first inputs ``[..., F]`` and goal inputs ``[..., G]``, or, with
        ``goal_index`` ``[...]``, of a goal table ``[R, G]`` whose rows ``goal_index`` pairs with the first inputs
        (the TD targets' paths: one goal for all steps of a row, whose goal branch then runs once).
        """
        f_1, f_g = self.first(x_1), self.goal(x_g)
        if goal_index is not None:
            f_g = rows(f_g, goal_index)
        return self.head(self.maxout(torch.cat([f_1, f_g, f_1 * f_g], -1)))


class GoalCritic(nn.Module):
    """Q(s, a, g_s) ≥ 0 (softplus output) of SPEC §5b.

    The output layer starts small with a negative bias, so that V starts near ``softplus(init_bias)``
    everywhere (≈ 0.13 for −2) as the DQN variant's Q starts near 0: a successor value learns upwards
    from "not reachable yet". With PyTorch's default initialisation V would start at ≈ 0.69 for every
    goal, and a goal that is never reached only decays from there by the bootstraps' slow γ-contraction.

    Args:
        obs_encoder, goal_encoder: φ of the state and of the goal (``out_features`` attributes; SPEC §5c).
        action_dim: size of the action, appended to φ(s) unencoded.
        init_bias: initial bias of the output before the softplus.
        **sizes: :class:`TwoBranchNet`'s widths.
    """

    def __init__(self, obs_encoder: nn.Module, goal_encoder: nn.Module, action_dim: int, init_bias: float = -2.0,
                 **sizes) -> None:
        super().__init__()
        self.obs_encoder, self.goal_encoder = obs_encoder, goal_encoder
        self.net = TwoBranchNet(obs_encoder.out_features + action_dim, goal_encoder.out_features, 1, **sizes)
        out = self.net.head[-1]
        nn.init.normal_(out.weight, std=0.01)
        nn.init.constant_(out.bias, init_bias)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, goal: torch.Tensor,
                goal_index: torch.Tensor | None = None) -> torch.Tensor:
        """``[...]`` values of states ``[..., obs_dim]``, actions ``[..., action_dim]``, goals ``[..., goal_dim]``
        (or a goal table ``[R, goal_dim]`` and each state's row in it, ``goal_index`` ``[...]``)."""
        x = torch.cat([self.obs_encoder(obs), action.to(obs.dtype)], -1)
        # The softplus and what follows (TD(λ) returns, losses) in float32 also under bf16 autocast.
        return F.softplus(self.net(x, self.goal_encoder(goal), goal_index).float()).squeeze(-1)


class GoalActor(nn.Module):
    """π(s, g_s) ∈ [−1, 1]^action_dim (tanh output) of SPEC §5b.

    Args:
        obs_encoder, goal_encoder: φ of the state and of the goal (``out_features`` attributes; SPEC §5c).
        action_dim: size of the action.
        **sizes: :class:`TwoBranchNet`'s widths.
    """

    def __init__(self, obs_encoder: nn.Module, goal_encoder: nn.Module, action_dim: int, **sizes) -> None:
        super().__init__()
        self.obs_encoder, self.goal_encoder = obs_encoder, goal_encoder
        self.net = TwoBranchNet(obs_encoder.out_features, goal_encoder.out_features, action_dim, **sizes)

    def forward(self, obs: torch.Tensor, goal: torch.Tensor, goal_index: torch.Tensor | None = None) -> torch.Tensor:
        """Actions ``[..., action_dim]`` (float32) of states and goals as :meth:`GoalCritic.forward` takes them."""
        return torch.tanh(self.net(self.obs_encoder(obs), self.goal_encoder(goal), goal_index).float())
