"""Area under a metric's curve against env frames (SPEC §7: the AUC of coverage and entropy)."""

from __future__ import annotations

from collections.abc import Sequence


def curve_auc(steps: Sequence[float], values: Sequence[float]) -> float:
    """The curve's mean height: the trapezoid area from the first to the last logged step, divided by
    their distance (the value itself for a single point).

    Args:
        steps: env frames at which the metric was logged (any order; sorted here).
        values: the metric at those steps.

    Raises:
        ValueError: no points, or steps and values of different lengths.
    """
    if len(steps) != len(values) or not steps:
        raise ValueError(f"need as many steps as values, at least one; got {len(steps)} and {len(values)}")
    points = sorted(zip(steps, values))
    if len(points) == 1 or points[-1][0] == points[0][0]:
        return float(points[-1][1])
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:]))
    return float(area / (points[-1][0] - points[0][0]))
