"""The 95 % intervals over seeds against direct computations on fixed per-seed numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from sun_lightning.results.intervals import (Interval, averaged_relative_interval, difference_interval, format_interval,
                                             iqm, mean_interval, mean_ratio_interval, normalized_iqm,
                                             pointwise_mean_interval, probability_of_improvement, relative_interval,
                                             seeds_text, verdict, win_fraction)


def exact_percentile_interval(samples, statistic):
    """The percentile interval of the whole bootstrap distribution: every resample of every sample enumerated
    (n^n each), its 2.5 % and 97.5 % quantiles of the discrete distribution."""
    draws = [list(itertools.product(s, repeat=len(s))) for s in samples]
    values = np.array([statistic(*[np.array(d) for d in combo]) for combo in itertools.product(*draws)])
    return np.quantile(values, 0.025, method="inverted_cdf"), np.quantile(values, 0.975, method="inverted_cdf")


def test_one_seed_has_no_interval_and_two_seeds_give_their_range():
    assert mean_interval([0.4]) == Interval(0.4, None, None, (1,))
    assert mean_interval([None, 0.4, float("nan")]) == Interval(0.4, None, None, (1,))  # n counts values that exist
    assert mean_interval([None]) is None  # the metric does not apply
    # n = 2: the bootstrap means are 0.1, 0.2, 0.3 with probabilities 1/4, 1/2, 1/4: the 2.5 % and 97.5 % are the seeds
    assert mean_interval([0.3, 0.1]) == Interval(pytest.approx(0.2), pytest.approx(0.1), pytest.approx(0.3), (2,))
    assert format_interval(mean_interval([0.4])) == "0.400 (n = 1)"
    assert format_interval(mean_interval([0.3, 0.1])) == "0.200 [0.100, 0.300] (n = 2)"
    assert format_interval(mean_interval([0.00217, 0.00237])) == "0.00227 [0.00217, 0.00237] (n = 2)"
    assert format_interval(None) == "n/a"
    # several samples (two methods on each of two environments): equal seeds once, unequal ones each
    assert seeds_text((4, 4, 4, 4)) == "n = 4 each (4 samples)" and seeds_text((3, 3)) == "n = 3 / 3"
    assert seeds_text((1, 1, 1, 2)) == "n = 1 / 1 / 1 / 2"


def test_the_mean_interval_is_the_bootstrap_distributions_quantiles():
    values = [0.12, 0.31, 0.18, 0.44, 0.25]  # 5^5 = 3125 resamples, enumerated
    low, high = exact_percentile_interval([values], np.mean)
    got = mean_interval(values)
    assert got.value == pytest.approx(np.mean(values))
    assert got.low == pytest.approx(low, abs=0.006) and got.high == pytest.approx(high, abs=0.006)
    assert 0.16 < got.low < 0.18 and 0.35 < got.high < 0.37  # inside the range [0.12, 0.44]
    assert mean_interval(values) == got  # a fixed seed: the same report each time


def test_a_difference_and_a_relative_improvement_resample_each_method_on_its_own():
    sun, base = [0.30, 0.36, 0.33], [0.20, 0.26]
    diff = difference_interval(sun, base)
    low, high = exact_percentile_interval([sun, base], lambda x, y: x.mean() - y.mean())
    assert diff.value == pytest.approx(0.33 - 0.23) and diff.n == (3, 2)
    assert diff.low == pytest.approx(low, abs=0.004) and diff.high == pytest.approx(high, abs=0.004)
    assert diff.excludes_zero and verdict(diff) == "beats"
    rel = relative_interval(sun, base)
    low, high = exact_percentile_interval([sun, base], lambda x, y: 100 * (x.mean() - y.mean()) / y.mean())
    assert rel.value == pytest.approx(100 * 0.10 / 0.23)
    assert rel.low == pytest.approx(low, abs=1.5) and rel.high == pytest.approx(high, abs=1.5)
    # overlapping seeds: the interval of the difference holds 0, and that is a tie
    tie = difference_interval([0.30, 0.20, 0.25], [0.24, 0.28])
    assert tie.low < 0 < tie.high and verdict(tie) == "ties" and verdict(None) == "ties"
    assert verdict(difference_interval([0.1, 0.12], [0.3, 0.31])) == "loses"
    # a baseline of one seed is held at its value: the interval is SUN's seed noise alone
    one = difference_interval([0.30, 0.36], [0.20])
    assert (one.low, one.high) == (pytest.approx(0.10), pytest.approx(0.16)) and one.n == (2, 1)
    assert difference_interval([0.3], [0.2]) == Interval(pytest.approx(0.1), None, None, (1, 1))
    assert relative_interval([0.3], [0.0, 0.0]) is None  # no scale to compare against
    assert format_interval(rel, 1, " %", signed=True).startswith("+43.5 % [+")


def test_averaged_improvement_and_runtime_ratio_over_environments():
    pairs = [([0.4, 0.6], [0.5]), ([0.2], [0.1, 0.3])]
    got = averaged_relative_interval(pairs)
    # means 0.5 and 0.2 against 0.5 and 0.2: +0 %; resampled: (0.4 | 0.5 | 0.6) with 1/4, 1/2, 1/4, and 0.1 | 0.2 | 0.3
    assert got.value == pytest.approx(0.0) and got.n == (2, 1, 1, 2)
    low, high = exact_percentile_interval(
        [p for pair in pairs for p in pair],
        lambda a, b, c, d: 100 * ((a.mean() + c.mean()) / 2 - (b.mean() + d.mean()) / 2) / ((b.mean() + d.mean()) / 2))
    assert got.low == pytest.approx(low, abs=1e-6) and got.high == pytest.approx(high, abs=1e-6)
    # the paper's "3.54× faster": the mean over environments of baseline minutes / SUN minutes
    ratio = mean_ratio_interval([([192.1], [56.6]), ([469.5], [108.9])])
    assert ratio.value == pytest.approx((192.1 / 56.6 + 469.5 / 108.9) / 2) and ratio.low is None


def test_probability_of_improvement_is_a_count_of_pairs():
    # env 1: x = (1, 2, 3) against y = (2, 2): pairs won 1·0 + 2·(ties ½) + 3·(2 wins) → (0 + 1 + 2) / 6 = 0.5
    # env 2: x = (5,) against y = (1, 6): one win, one loss → 0.5; env 3: (4, 4) against (1,): 1
    assert win_fraction(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0])) == pytest.approx(0.5)
    u = stats.mannwhitneyu([1, 2, 3], [2, 2]).statistic
    assert u / 6 == pytest.approx(0.5)
    got = probability_of_improvement([([1, 2, 3], [2, 2]), ([5], [1, 6]), ([4, 4], [1])])
    assert got.value == pytest.approx((0.5 + 0.5 + 1.0) / 3) and 0 <= got.low < got.value < got.high <= 1
    assert probability_of_improvement([([3], [1])]) == Interval(1.0, None, None, (1, 1))


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0])) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))
    # normalized by the baseline's mean per environment, pooled: 0.5, 1, 1.5, 2 and 5/3, 2 → middle half of six
    got = normalized_iqm([([1.0, 2.0, 3.0, 4.0], 2.0), ([5.0, 6.0], 3.0)])
    pooled = np.sort([0.5, 1.0, 1.5, 2.0, 5 / 3, 2.0])
    assert got.value == pytest.approx(stats.trim_mean(pooled, 0.25)) and got.n == (4, 2)
    assert got.low < got.value < got.high


def test_a_curve_band_is_each_frames_interval():
    curves = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 4.0]])  # two seeds: each frame's band is their range
    mean, low, high = pointwise_mean_interval(curves)
    np.testing.assert_allclose(mean, [0.5, 1.0, 3.0])
    np.testing.assert_allclose(low, [0.0, 1.0, 2.0]) and np.testing.assert_allclose(high, [1.0, 1.0, 4.0])
    assert pointwise_mean_interval(curves[:1])[1] is None
    five = np.array([[0.12], [0.31], [0.18], [0.44], [0.25]])
    _, low, high = pointwise_mean_interval(five)
    assert (low[0], high[0]) == (pytest.approx(mean_interval(five[:, 0]).low), pytest.approx(mean_interval(five[:, 0]).high))
