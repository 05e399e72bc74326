"""Observation encoders for continuous control (SPEC §5c).

Two building blocks:

* :class:`RunningMeanStd` standardizes raw observations with a running mean and
  standard deviation tracked by Welford's algorithm (paper appendix "Networks
  Architecture", Encoder).
* :class:`RBFEncoder` maps each (standardized) scalar input to ``C`` normalized
  radial-basis activations with learned centres and bandwidths, with a linear
  leak on the two boundary tiles so gradients do not vanish outside the span of
  the centres.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RunningMeanStd", "RBFEncoder"]


class RunningMeanStd(nn.Module):
    """Exact running mean / variance over a feature dimension (SPEC §5c).

    Statistics are kept as buffers (``count``, ``mean``, ``m2``) so that they
    are saved in checkpoints and moved with the module. They are float64:
    the buffer can hold millions of observations and float32 accumulation of
    ``m2`` would drift. Note that ``module.to(torch.float32)`` would cast them.

    Batches are merged with the parallel (Chan et al.) form of Welford's
    algorithm, which is exact: after any sequence of ``update`` calls the
    statistics equal the population mean/variance (``ddof=0``) of all rows seen.

    Args:
        num_features: Size ``D`` of the last dimension.
        eps: Floor on the standard deviation used by :meth:`forward`, so that
            constant features (variance 0) do not divide by zero.
    """

    count: Tensor
    mean: Tensor
    m2: Tensor

    def __init__(self, num_features: int, eps: float = 1e-4) -> None:
        super().__init__()
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(num_features, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(num_features, dtype=torch.float64))

    @property
    def var(self) -> Tensor:
        """Population variance (``ddof=0``); 1 before any data is seen (no host read: safe in captured CUDA code)."""
        return torch.where(self.count > 0, self.m2 / self.count.clamp(min=1.0), 1.0)

    @property
    def std(self) -> Tensor:
        """Standard deviation floored at ``eps``; 1 before any data is seen."""
        return self.var.sqrt().clamp_min(self.eps)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merges a batch of rows into the running statistics.

        Args:
            x: Tensor ``[..., D]``; all leading dimensions are treated as rows.
        """
        x = x.detach().reshape(-1, self.num_features).to(self.mean.dtype)
        n_b = x.shape[0]
        if n_b == 0:
            return
        mean_b = x.mean(dim=0)
        m2_b = ((x - mean_b) ** 2).sum(dim=0)
        n_a = self.count
        total = n_a + n_b
        delta = mean_b - self.mean
        # Chan et al. pairwise merge: exact for any split of the data.
        self.mean.add_(delta * (n_b / total))
        self.m2.add_(m2_b + delta**2 * (n_a * n_b / total))
        self.count.fill_(total)

    def forward(self, x: Tensor) -> Tensor:
        """Standardizes ``x`` as ``(x - mean) / std`` in ``x``'s dtype."""
        mean = self.mean.to(x.dtype)
        std = self.std.to(x.dtype)
        return (x - mean) / std

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, eps={self.eps}"


def _inverse_softplus(y: float) -> float:
    # softplus(r) = y  <=>  r = y + log(1 - exp(-y)); stable for small y.
    return y + math.log(-math.expm1(-y))


class RBFEncoder(nn.Module):
    """Normalized radial-basis layer with learned centres and bandwidths (SPEC §5c).

    For every input dimension ``d`` there are ``C`` tiles with centre
    ``mu[d, c]`` (initialized evenly on ``[v_min, v_max]``) and bandwidth
    ``h[d, c] = softplus(raw) + min_bandwidth`` (initialized to the centre
    spacing). Inside the span ``[mu_1, mu_C]`` of the boundary centres the
    activations are the Gaussians ``phi_c(x) = exp(-0.5 ((x - mu_c) / h_c)^2)``.

    Boundary leak (design choice, paper appendix "Networks Architecture"):
    outside the span, the *boundary* tile (tile 1 on the left, tile C on the
    right, by index) grows linearly with the distance measured in its own
    bandwidth, and every other tile is frozen at its value at that boundary::

        x < mu_1:  phi_1(x) = 1 + leak * (mu_1 - x) / h_1
                   phi_c(x) = exp(-0.5 ((mu_1 - mu_c) / h_c)^2),   c > 1
        x > mu_C:  phi_C(x) = 1 + leak * (x - mu_C) / h_C
                   phi_c(x) = exp(-0.5 ((mu_C - mu_c) / h_c)^2),   c < C

    Activations are continuous at the boundaries (both branches give 1 for
    the boundary tile). Freezing the inner tiles is what keeps gradients alive
    far outside: the pure Gaussians underflow to exactly 0 a few dozen
    bandwidths away, after which the normalized output would be the constant
    one-hot vector with zero gradient. With the freeze, the boundary tile's
    share ``phi_1 / sum_c phi_c`` grows strictly monotonically towards 1 and
    its derivative w.r.t. ``x``, the centres and bandwidths stays non-zero.

    The normalization over tiles is computed as a softmax of the
    log-activations (``-0.5 z^2`` and ``log1p(leak * d / h)``), which equals
    ``phi / sum(phi)`` but cannot produce ``0 / 0`` when every Gaussian
    underflows (e.g. tiny learned bandwidths between centres).

    If learned centres cross so that ``mu_1 > mu_C`` the clamp degenerates
    (every input maps to the frozen right-boundary profile plus leaks); the
    output stays finite and normalized.

    Args:
        in_features: Input dimension ``D``.
        num_centres: Tiles per input dimension ``C`` (paper: 20).
        v_min: Lowest initial centre (paper: -1).
        v_max: Highest initial centre (paper: 1).
        leak: Slope of the boundary tiles' linear growth, per bandwidth.
        min_bandwidth: Positive floor added to the softplus so ``z`` stays finite.

    Shape:
        Input ``[..., D]``; output ``[..., D * C]`` with the ``C`` tiles of
        dimension ``d`` contiguous at ``[d*C:(d+1)*C]``, each block summing to 1.
    """

    def __init__(
        self,
        in_features: int,
        num_centres: int = 20,
        v_min: float = -1.0,
        v_max: float = 1.0,
        leak: float = 1.0,
        min_bandwidth: float = 1e-3,
    ) -> None:
        super().__init__()
        if num_centres < 1:
            raise ValueError(f"num_centres must be >= 1, got {num_centres}")
        if v_max <= v_min:
            raise ValueError(f"v_max ({v_max}) must exceed v_min ({v_min})")
        self.in_features = int(in_features)
        self.num_centres = int(num_centres)
        self.out_features = self.in_features * self.num_centres
        self.leak = float(leak)
        self.min_bandwidth = float(min_bandwidth)

        centres = torch.linspace(v_min, v_max, num_centres).repeat(in_features, 1)
        spacing = (v_max - v_min) / max(num_centres - 1, 1)
        if spacing <= min_bandwidth:
            raise ValueError("centre spacing must exceed min_bandwidth")
        raw = _inverse_softplus(spacing - min_bandwidth)
        self.centres = nn.Parameter(centres)
        self.raw_bandwidth = nn.Parameter(torch.full((in_features, num_centres), raw))

    @property
    def bandwidth(self) -> Tensor:
        """Positive bandwidths ``h`` of shape ``[D, C]``."""
        return F.softplus(self.raw_bandwidth) + self.min_bandwidth

    def log_activations(self, x: Tensor) -> Tensor:
        """Unnormalized log-activations ``log phi`` of shape ``[..., D, C]``."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected last dim {self.in_features}, got {x.shape[-1]}")
        mu = self.centres
        h = self.bandwidth
        xe = x.unsqueeze(-1)  # [..., D, 1]
        lo = mu[:, :1]  # [D, 1] left boundary centre (tile 1)
        hi = mu[:, -1:]  # [D, 1] right boundary centre (tile C)
        # Inner tiles see x clamped into the span: outside it they are frozen.
        xc = torch.minimum(torch.maximum(xe, lo), hi)
        logits = -0.5 * ((xc - mu) / h) ** 2
        # Linear leak of the boundary tiles, added in log space; 0 inside the span.
        left = torch.log1p(self.leak * F.relu(lo - xe) / h[:, :1])
        right = torch.log1p(self.leak * F.relu(xe - hi) / h[:, -1:])
        # Place them on tile 1 and tile C (same tile when C == 1).
        c = self.num_centres
        leak = F.pad(left, (0, c - 1)) + F.pad(right, (c - 1, 0))
        return logits + leak

    def forward(self, x: Tensor) -> Tensor:
        """Encodes ``x`` of shape ``[..., D]`` into ``[..., D * C]`` (see class doc)."""
        probs = torch.softmax(self.log_activations(x), dim=-1)
        return probs.flatten(start_dim=-2)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, num_centres={self.num_centres}, "
            f"leak={self.leak}, min_bandwidth={self.min_bandwidth}"
        )


class StandardizedRBF(nn.Module):
    """Running standardization then the RBF layer: the continuous-input encoder φ of SPEC §5c.

    The state and goal encoders share one :class:`RunningMeanStd` over the raw
    observation; the goal encoder reads the statistics of the goal dimensions
    (g_s is a projection of the state, so it is standardized like it).

    Args:
        stats: the shared running statistics of observations.
        dims: observation indices this encoder's input corresponds to (``None``: all).
        num_centres: RBF tiles per input dimension.
    """

    def __init__(self, stats: RunningMeanStd, dims: tuple[int, ...] | None = None, num_centres: int = 20) -> None:
        super().__init__()
        self.stats = stats
        self.dims = None if dims is None else list(dims)
        width = stats.mean.shape[0] if dims is None else len(dims)
        self.rbf = RBFEncoder(width, num_centres)

    @property
    def out_features(self) -> int:
        return self.rbf.out_features

    def forward(self, x: Tensor) -> Tensor:
        mean, std = self.stats.mean, self.stats.std
        if self.dims is not None:
            dims = self.dims
            if dims == list(range(dims[0], dims[0] + len(dims))):
                mean, std = mean[dims[0]:dims[0] + len(dims)], std[dims[0]:dims[0] + len(dims)]  # views, no copy
            else:
                mean, std = mean[dims], std[dims]
        return self.rbf(((x - mean) / std).to(x.dtype))
