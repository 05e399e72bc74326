"""95 % confidence intervals over seeds, as the paper reports its results (SPEC §7).

The paper gives "means (thick lines) with 95 % confidence intervals (shaded areas) across 20 seeds" (its main-results
figure). Here every interval is a percentile bootstrap over seeds, computed by :func:`scipy.stats.bootstrap`
(9 999 resamples, a fixed seed, so a report is the same each time it is written): each sample (one method's seeds on
one environment) is resampled with replacement at its own size, independently of the others, which is the stratified
bootstrap of rliable (Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice"). rliable itself needs
every environment of a method to have the same number of runs (a runs × tasks matrix); the studies here often do not
(one DISCOVER seed beside three of SUN), and scipy takes samples of any size. The aggregates are rliable's:
the interquartile mean (:func:`iqm`, :func:`scipy.stats.trim_mean` at 25 %) and the probability of improvement
(:func:`probability_of_improvement`, the Mann–Whitney U statistic over its maximum).

Small n, decided here once for every table and curve:

- n = 1: no interval. A sample of one value resamples to itself; the cell shows the value and "n = 1".
  In a statistic of several samples (a difference, a ratio, an average over environments), a sample of one seed
  is held at its value and the others are resampled: the interval then covers the other samples' seed noise only,
  and is ``None`` when every sample has one seed.
- n = 2: the percentile interval of a mean is the two seeds' range, [min, max] (the bootstrap means are the
  lower seed, the midpoint and the higher seed with probabilities 1/4, 1/2, 1/4). It is shown, and it is wide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The paper's confidence level.
CONFIDENCE = 0.95
#: Bootstrap resamples (scipy's default) and the seed that makes a report reproducible.
RESAMPLES, SEED = 9999, 0


@dataclass(frozen=True)
class Interval:
    """A point estimate, its 95 % interval (``None`` where no sample has two values) and the seeds behind it.

    Attributes:
        value: the statistic on the data as they are (a mean, a difference of means, a ratio, ...).
        low, high: the interval's ends, or ``None``.
        n: the seeds of each sample, in the order given.
    """

    value: float
    low: float | None
    high: float | None
    n: tuple[int, ...]

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of 0 (a difference that is "beats", not "ties")."""
        return self.low is not None and (self.low > 0 or self.high < 0)


def finite(values: Sequence[float | None]) -> np.ndarray:
    """The values that exist and are finite, as floats (``None``: a metric that does not apply to that run)."""
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def bootstrap_interval(samples: Sequence[Sequence[float]], statistic: Callable[..., np.ndarray],
                       confidence: float = CONFIDENCE, resamples: int = RESAMPLES) -> Interval | None:
    """``statistic(*samples)`` and its stratified percentile-bootstrap interval (:func:`scipy.stats.bootstrap`).

    Args:
        samples: independent samples (each a method's per-seed values on one environment); a one-value sample
            is held fixed, the others are resampled (module docstring).
        statistic: ``statistic(*arrays) -> value``, vectorized: each array has the sample along its last axis and
            any batch axes before it; returns an array of the batch shape.
        confidence: the interval's coverage.
        resamples: the bootstrap's resamples.

    Returns:
        The :class:`Interval`; ``None`` if a sample is empty.
    """
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if not arrays or any(a.size == 0 for a in arrays):
        return None
    value = float(statistic(*arrays))
    varying = [i for i, a in enumerate(arrays) if a.size > 1]
    n = tuple(a.size for a in arrays)
    if not varying or not math.isfinite(value):
        return Interval(value, None, None, n)

    def resampled(*drawn: np.ndarray, axis: int = -1) -> np.ndarray:
        batch = drawn[0].shape[:-1]
        full = [np.broadcast_to(a, batch + a.shape) for a in arrays]
        for i, d in zip(varying, drawn):
            full[i] = d
        return statistic(*full)

    result = stats.bootstrap([arrays[i] for i in varying], resampled, n_resamples=resamples, vectorized=True,
                             confidence_level=confidence, method="percentile", rng=np.random.default_rng(SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return Interval(value, low, high, n)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.mean(axis=axis)


def mean_interval(values: Sequence[float | None]) -> Interval | None:
    """The mean over seeds and its 95 % interval (``None`` where no value exists: the metric does not apply)."""
    kept = finite(values)
    return bootstrap_interval([kept], _mean) if kept.size else None


def pointwise_mean_interval(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Mean over seeds (rows) at each column (a frame) and the 95 % interval of each column's mean.

    Returns:
        ``(mean, low, high)``; ``low`` and ``high`` are ``None`` for one seed.
    """
    curves = np.asarray(curves, dtype=float)
    mean = curves.mean(0)
    if len(curves) < 2:
        return mean, None, None
    result = stats.bootstrap([curves], _mean, n_resamples=RESAMPLES, vectorized=True, axis=0,
                             confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(SEED))
    return mean, np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def difference_interval(a: Sequence[float | None], b: Sequence[float | None]) -> Interval | None:
    """mean(a) − mean(b) and its 95 % interval (two independent samples of seeds); ``None`` if either is empty."""
    return bootstrap_interval([finite(a), finite(b)], lambda x, y: _mean(x) - _mean(y))


def relative_interval(a: Sequence[float | None], b: Sequence[float | None]) -> Interval | None:
    """The paper's relative improvement ``100 · (mean(a) − mean(b)) / mean(b)`` (%) and its 95 % interval;
    ``None`` where it is undefined (a sample empty, or mean(b) ≤ 0, :func:`~sun_lightning.results.relative.relative_improvement`)."""
    x, y = finite(a), finite(b)
    if not x.size or not y.size or y.mean() <= 0:
        return None
    return bootstrap_interval([x, y], _ratio_percent)


def _ratio_percent(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    base = _mean(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(base > 0, 100.0 * (_mean(x) - base) / np.where(base > 0, base, 1.0), np.nan)


def averaged_relative_interval(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Interval | None:
    """The paper's improvement averaged over environments, ``100 · (Ā − B̄) / B̄`` where Ā and B̄ average each
    environment's mean over seeds, and its stratified 95 % interval (each environment's seeds of each method
    resampled on their own).

    Args:
        pairs: per environment, (the method's per-seed AUCs, the baseline's).
    """
    kept = [(finite(a), finite(b)) for a, b in pairs]
    kept = [(a, b) for a, b in kept if a.size and b.size]
    if not kept or np.mean([b.mean() for _, b in kept]) <= 0:
        return None

    def averaged(*arrays: np.ndarray) -> np.ndarray:
        own = np.mean([_mean(x) for x in arrays[0::2]], axis=0)
        base = np.mean([_mean(y) for y in arrays[1::2]], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(base > 0, 100.0 * (own - base) / np.where(base > 0, base, 1.0), np.nan)

    return bootstrap_interval([s for pair in kept for s in pair], averaged)


def mean_ratio_interval(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Interval | None:
    """The mean over environments of ``mean(a) / mean(b)`` (the paper's "SUN is on average 3.54× faster than
    AdaGoal": a is AdaGoal's minutes per seed, b SUN's), and its stratified 95 % interval."""
    kept = [(finite(a), finite(b)) for a, b in pairs]
    kept = [(a, b) for a, b in kept if a.size and b.size and b.mean() > 0]
    if not kept:
        return None

    def ratio(*arrays: np.ndarray) -> np.ndarray:
        return np.mean([_mean(x) / _mean(y) for x, y in zip(arrays[0::2], arrays[1::2])], axis=0)

    return bootstrap_interval([s for pair in kept for s in pair], ratio)


def win_fraction(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) over every pair of a value of ``x`` and one of ``y`` (last axes; batch axes before):
    the Mann–Whitney U statistic of x over its maximum, len(x) · len(y)."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * ties


def probability_of_improvement(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Interval | None:
    """rliable's probability of improvement: the mean over environments of P(a run of X beats a run of Y on that
    environment) (:func:`win_fraction`, ties count one half), and its stratified 95 % interval.

    Args:
        pairs: per environment, (X's per-seed values, Y's).
    """
    kept = [(finite(a), finite(b)) for a, b in pairs]
    kept = [(a, b) for a, b in kept if a.size and b.size]
    if not kept:
        return None

    def average(*arrays: np.ndarray) -> np.ndarray:
        return np.mean([win_fraction(x, y) for x, y in zip(arrays[0::2], arrays[1::2])], axis=0)

    return bootstrap_interval([s for pair in kept for s in pair], average)


def iqm(values: np.ndarray) -> np.ndarray:
    """The interquartile mean along the last axis (the mean of the middle 50 %, rliable's IQM)."""
    return stats.trim_mean(values, 0.25, axis=-1)


def normalized_iqm(pairs: Sequence[tuple[Sequence[float], float]]) -> Interval | None:
    """The IQM of a method's runs normalized per environment, pooled over environments, and its stratified 95 %
    interval.

    Args:
        pairs: per environment, (the method's per-seed values, the reference they are divided by: the baseline's
            mean on that environment, so 1 is the baseline and 1.2 is the paper's "+20 %"). References ≤ 0 are
            left out.
    """
    kept = [finite(a) / ref for a, ref in pairs if ref is not None and ref > 0 and finite(a).size]
    if not kept:
        return None
    return bootstrap_interval(kept, lambda *arrays: iqm(np.concatenate(arrays, axis=-1)))


# ---- how an interval reads ------------------------------------------------------------------------------
def digits_for(value: float, digits: int = 3) -> int:
    """``digits`` decimals, or more for a value below 0.1 so that it keeps 3 significant figures (PointMaze-H's
    coverage is 0.00217, not 0.002)."""
    if value and math.isfinite(value) and abs(value) < 0.1:
        return max(digits, 2 - math.floor(math.log10(abs(value))))
    return digits


def seeds_text(n: Sequence[int]) -> str:
    """``n = 3``; ``n = 3 / 1`` for a statistic of two samples; for more samples (SUN's and a baseline's seeds on
    each of several environments) ``n = 4 each (6 samples)`` where they are equal, else every sample's seeds."""
    if len(n) > 2 and len(set(n)) == 1:
        return f"n = {n[0]} each ({len(n)} samples)"
    return "n = " + " / ".join(map(str, n))


def format_interval(interval: Interval | None, digits: int = 3, unit: str = "", signed: bool = False,
                    na: str = "n/a") -> str:
    """``0.135 [0.129, 0.141] (n = 3)``; one seed: ``0.135 (n = 1)``; ``unit`` " %" and ``signed`` for improvements
    (``+23.5 % [+14.0, +33.1] (n = 3 / 3)``, always ``digits`` decimals: +0.0 %, not +0.00605 %)."""
    if interval is None:
        return na
    d = digits if signed else digits_for(interval.value, digits)
    spec = f"{'+' if signed else ''}.{d}f"
    text = f"{interval.value:{spec}}{unit}"
    if interval.low is not None:
        text += f" [{interval.low:{spec}}, {interval.high:{spec}}]"
    return f"{text} ({seeds_text(interval.n)})"


def verdict(difference: Interval | None) -> str:
    """How a difference reads in prose: "beats" where its 95 % interval excludes 0 above, "loses" below, else
    "ties" (the rule for every claim in the docs)."""
    if difference is None or not difference.excludes_zero:
        return "ties"
    return "beats" if difference.low > 0 else "loses"
