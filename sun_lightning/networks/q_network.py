"""Goal-conditioned Q network of the DQN variant (SPEC §5a, paper figure "Architecture of Q")."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F



class _PieceMax(torch.autograd.Function):
    """Max over the piece axis of ``[..., pieces, units]`` with a one-mask backward.

    ``amax``'s own backward (eq, count, divide, expand) and ``max(dim)``'s
    scatter cost more than the forward on CPU; ties between
    pieces have probability zero with float weights.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(pieces: torch.Tensor) -> torch.Tensor:
        return pieces.amax(-2)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        pieces, out = ctx.saved_tensors
        # The mask written as floats, then scaled in place: no bool → float conversion pass.
        if _is_batched(pieces):  # under vmap (ensembles) ``out=`` has no batching rule
            return (pieces == out.unsqueeze(-2)) * grad.unsqueeze(-2)
        mask = torch.eq(pieces, out.unsqueeze(-2), out=torch.empty_like(pieces))
        return mask.mul_(grad.unsqueeze(-2))


def _is_batched(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a vmap batched tensor (functorch has no public test for it)."""
    return torch._C._functorch.is_batchedtensor(tensor)


class Maxout(nn.Module):
    """``pieces`` parallel bias-free linear maps reduced by an elementwise max.

    One fused matmul computes all pieces, laid out piece-major so that the max
    runs over a strided axis and vectorizes across units.
    """

    def __init__(self, in_features: int, out_features: int, pieces: int = 4) -> None:
        super().__init__()
        self.out_features, self.pieces = out_features, pieces
        self.linear = nn.Linear(in_features, out_features * pieces, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.linear(x))

    def reduce(self, pre: torch.Tensor) -> torch.Tensor:
        """The max over pieces of pre-activations ``[..., pieces · out_features]``."""
        return _PieceMax.apply(pre.unflatten(-1, (self.pieces, self.out_features)))


class Branch(nn.Module):
    """Linear → LayerNorm → Dropout → SiLU, the state and goal branches of Q."""

    def __init__(self, in_features: int, width: int, dropout: float) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, width, bias=False)
        self.norm = nn.LayerNorm(width, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, dropout: bool) -> torch.Tensor:
        h = self.norm(self.linear(x))
        if dropout and self.dropout > 0:
            h = h * dropout_mask(h.shape, self.dropout, h.device)
        return F.silu(h)


def dropout_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """Inverted-dropout mask (0 or 1 / (1 − p)) with p quantized to 1/65536.

    Four 16-bit draws come out of each 64-bit random number, a quarter of the
    random numbers ``F.dropout``'s Bernoulli draws need.
    """
    n = shape.numel()
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=device)
    bits = words.view(torch.int16)[:n].view(shape)
    threshold = round(p * 65536) - 32768  # keep a unit where its signed 16-bit draw is at least this
    return (bits >= threshold).to(torch.float32) * (1.0 / (1.0 - p))


class GoalQNetwork(nn.Module):
    """Q(s, g_s) → |A| × |A| values: Q(s, a, g_s, g_a) for every action a and goal action g_a.

    Architecture of SPEC §5a: encoder φ on s and g_s (identity for one-hot
    gridworlds, an RBF layer for continuous inputs, §5c), each branch
    Linear → LayerNorm → Dropout → SiLU; fusion concat(f_s, f_g, f_s ⊙ f_g);
    Maxout (4 × Linear); LayerNorm → LeakyReLU → Linear → LayerNorm → LeakyReLU
    → Linear |A|². Linear weights N(0, 0.01²); no biases except the last layer.

    Args:
        obs_dim: input size of the state branch (after the encoder).
        goal_dim: input size of the goal branch (after the encoder).
        num_actions: |A|.
        width: hidden width (64 in the paper).
        maxout_pieces: parallel linear maps of the maxout layer.
        dropout: dropout probability of the branches.
        init_std: std of the normal weight initialisation.
        obs_encoder, goal_encoder: modules applied to s and g_s first (identity if None).
    """

    def __init__(
        self,
        obs_dim: int,
        goal_dim: int,
        num_actions: int,
        width: int = 64,
        maxout_pieces: int = 4,
        dropout: float = 0.1,
        init_std: float = 0.01,
        obs_encoder: nn.Module | None = None,
        goal_encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.num_actions = num_actions
        self.obs_encoder = obs_encoder or nn.Identity()
        self.goal_encoder = goal_encoder or nn.Identity()
        self.state_branch = Branch(obs_dim, width, dropout)
        self.goal_branch = Branch(goal_dim, width, dropout)
        self.maxout = Maxout(3 * width, width, maxout_pieces)
        self.head = nn.Sequential(
            nn.LayerNorm(width, bias=False),
            nn.LeakyReLU(),
            nn.Linear(width, width, bias=False),
            nn.LayerNorm(width, bias=False),
            nn.LeakyReLU(),
            nn.Linear(width, num_actions * num_actions),
        )
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=init_std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(
        self,
        obs: torch.Tensor,
        goal: torch.Tensor,
        dropout: bool = False,
        obs_index: torch.Tensor | None = None,
        goal_index: torch.Tensor | None = None,
        goal_action: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q values ``[..., |A| (action), |A| (goal action)]``, or ``[..., |A|]`` at ``goal_action``.

        Args:
            obs: states ``[..., D]``, or a table of distinct states ``[U_s, D]`` with ``obs_index``.
            goal: goals ``[..., G]``, or a table ``[U_g, G]`` with ``goal_index``.
            dropout: apply the branches' dropout (learning updates only; never
                when acting or selecting goals, whatever the train/eval mode).
            obs_index, goal_index: rows ``[R]`` into the tables: each branch
                then runs once per distinct input and its features are gathered.
            goal_action: the goal action of each row ``[...]``: returns Q(s, ·, g_s, g_a).
        """
        f_s, pre_s, f_g, pre_g = self.tables(obs, goal, dropout)
        # index_select: a plain row gather, cheaper than advanced indexing on CPU.
        if obs_index is not None:
            f_s, pre_s = f_s.index_select(0, obs_index), pre_s.index_select(0, obs_index)
        if goal_index is not None:
            f_g, pre_g = f_g.index_select(0, goal_index), pre_g.index_select(0, goal_index)
        return self.rows(f_s, pre_s, f_g, pre_g, goal_action)

    def tables(self, obs: torch.Tensor, goal: torch.Tensor, dropout: bool = False) -> tuple[torch.Tensor, ...]:
        """What runs once per distinct input: the branch features f_s, f_g and their shares of the maxout's
        pre-activations. The maxout's linear map of concat(f_s, f_g, f_s ⊙ f_g) is the sum of three maps; the
        first two run on the tables, only the product's per row (:meth:`rows`)."""
        x_s, x_g = self.encode(obs, goal)
        f_s, f_g = self.state_branch(x_s, dropout), self.goal_branch(x_g, dropout)
        w_s, w_g, _ = self.maxout.linear.weight.split(f_s.shape[-1], dim=1)
        return f_s, F.linear(f_s, w_s), f_g, F.linear(f_g, w_g)

    def rows(self, f_s: torch.Tensor, pre_s: torch.Tensor, f_g: torch.Tensor, pre_g: torch.Tensor,
             goal_action: torch.Tensor | None = None) -> torch.Tensor:
        """Q of rows from their gathered :meth:`tables` entries (``[..., |A|, |A|]``, or ``[..., |A|]`` at ``goal_action``)."""
        w_p = self.maxout.linear.weight.split(f_s.shape[-1], dim=1)[2]
        # In place where the shapes allow: these [rows, pieces · width] passes,
        # not the matmuls, dominate an update on CPU. Neither op's backward
        # needs the overwritten values.
        pre = pre_s.add_(pre_g) if pre_s.shape == pre_g.shape else pre_s + pre_g
        if pre.dim() == 2 and not _is_batched(pre) and pre.dtype == w_p.dtype:
            # (vmap has no batching rule for addmm_, and in-place ops do not autocast)
            pre = pre.addmm_(f_s * f_g, w_p.t())  # accumulates in the GEMM: no copy of pre
        else:
            pre = pre + F.linear(f_s * f_g, w_p)
        h = self.maxout.reduce(pre)
        # float32 from here (TD(λ) returns, losses, selection scores) also under bf16 autocast
        q = self.head(h).float().unflatten(-1, (self.num_actions, self.num_actions))
        if goal_action is None:
            return q
        return q.gather(-1, goal_action.long()[..., None, None].expand(*q.shape[:-1], 1)).squeeze(-1)

    def encode(self, obs: torch.Tensor, goal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """φ(s) and φ(g_s), the inputs of the two branches (SPEC §5c)."""
        encoders = self._modules
        if type(encoders["obs_encoder"]) is nn.Identity and type(encoders["goal_encoder"]) is nn.Identity:
            return obs, goal  # (the common case, without two module calls)
        return self.obs_encoder(obs), self.goal_encoder(goal)
