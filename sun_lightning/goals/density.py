"""Gaussian kernel density of achieved goals, the novelty MEGA scores goals by (Pitis et al., 2020; paper §"Related work").

Pure tensor functions. Goals are standardized per dimension by the fitting sample's mean and std before the
kernel is applied, as both public MEGA implementations do (mrl's ``RawKernelDensity._optimize``, DISCOVER's
``goal_density_estimator``). The kernel's covariance is either

* Scott's rule, ``Σ = cov(data) · n^(−2/(d+4))`` with the unbiased covariance of the (standardized) data:
  ``jax.scipy.stats.gaussian_kde``'s default, which DISCOVER's TD3 code fits (``td3_train.py`` line 758), and
  scipy's ``gaussian_kde``; or
* a fixed isotropic bandwidth h, ``Σ = h² I``: scikit-learn's ``KernelDensity(kernel="gaussian", bandwidth=h)``,
  mrl's choice (h = 0.1, ``experiments/mega/train_mega.py`` line 307).

Both are the same sum ``log p(x) = logsumexp_i(−½ (x − x_i)ᵀ Σ⁻¹ (x − x_i)) − log n − ½ log det(2π Σ)``,
evaluated on whitened coordinates in chunks so that 5 000 × 5 000 pairs stay a few tens of MB.
"""

from __future__ import annotations

import math

import torch

#: Added to the per-dimension std (mrl's ``+ 1e-4``): a goal dimension that never moved does not divide by 0.
STD_EPS = 1e-4
#: Added to the diagonal of Scott's covariance (in standardized units): a degenerate sample (all goals on a line)
#: keeps a positive-definite kernel instead of failing its Cholesky factorisation.
COV_JITTER = 1e-6
_CHUNK = 1024


def standardizer(samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std (population, plus :data:`STD_EPS`) of ``samples [n, d]`` per dimension."""
    samples = samples.double()
    return samples.mean(0), samples.std(0, correction=0) + STD_EPS


def kde_log_density(data: torch.Tensor, points: torch.Tensor, bandwidth: float | None = None) -> torch.Tensor:
    """Log density of ``points [m, d]`` under a Gaussian KDE fitted on ``data [n, d]``, both in the same
    (already standardized) coordinates; ``bandwidth None``: Scott's rule with the data's covariance, else
    ``Σ = bandwidth² I``. Returns ``[m]`` float64."""
    data, points = data.double(), points.double()
    n, d = data.shape
    if n == 0:
        raise ValueError("a kernel density needs at least one sample")
    if bandwidth is None:
        factor = n ** (-1.0 / (d + 4))
        cov = torch.atleast_2d(torch.cov(data.T, correction=1)) if n > 1 else torch.eye(d, dtype=data.dtype)
        cov = cov * factor**2 + COV_JITTER * torch.eye(d, dtype=data.dtype)
    else:
        cov = torch.eye(d, dtype=data.dtype) * float(bandwidth) ** 2
    chol = torch.linalg.cholesky(cov)
    whiten = torch.linalg.inv(chol).T  # x @ whiten has identity covariance under the kernel
    data_w = data @ whiten
    log_norm = math.log(n) + 0.5 * d * math.log(2 * math.pi) + torch.log(torch.diagonal(chol)).sum()
    out = torch.empty(points.shape[0], dtype=torch.float64)
    for start in range(0, points.shape[0], _CHUNK):
        chunk = points[start:start + _CHUNK] @ whiten
        squared = torch.cdist(chunk, data_w).square()
        out[start:start + _CHUNK] = torch.logsumexp(-0.5 * squared, dim=1) - log_norm
    return out


def goal_log_density(sample: torch.Tensor, goals: torch.Tensor, bandwidth: float | None = None) -> torch.Tensor:
    """Log density of ``goals [..., d]`` under a KDE of the achieved goals ``sample [n, d]``, in the coordinates
    standardized by the sample (the ranking MEGA uses; the Jacobian of the standardization is a constant)."""
    mean, std = standardizer(sample)
    flat = goals.reshape(-1, goals.shape[-1])
    density = kde_log_density((sample.double() - mean) / std, (flat.double() - mean) / std, bandwidth)
    return density.reshape(goals.shape[:-1])
