"""Relative AUC improvement of one method over a baseline, as in the paper's table (SPEC §7).

The paper's Figure "sun_all_relative_improvement" (``fig:sun_all_relative_improvement`` in
``paper/sun_paper.tex``) gives the "Relative AUC improvement of each SUN version over AdaGoal,
DISCOVER, and Random" in percent, of coverage and of entropy, from the AUCs "averaged over all
environments". It does not write the formula out; its numbers fit

    improvement(m, b) = 100 · (AUC_m − AUC_b) / AUC_b  [%],

a ratio of the two methods' AUCs: for two SUN rows the ratio (1 + r₁)/(1 + r₂) must then be the same
against every baseline, and the table's is, to its rounding (coverage, adaptive vs additive:
1.151/1.025 = 1.123 over AdaGoal, 1.210/1.079 = 1.121 over DISCOVER, 1.671/1.489 = 1.122 over Random).
Per environment, AUC_m and AUC_b are the means over seeds of each run's AUC
(:func:`~sun_lightning.metrics.auc.curve_auc`). Its 95 % interval over both methods' seeds is
:func:`~sun_lightning.results.intervals.relative_interval` (averaged over environments:
:func:`~sun_lightning.results.intervals.averaged_relative_interval`).
"""

from __future__ import annotations

#: The baselines of the paper's table, in its column order (method names of ``sun_lightning.methods``).
BASELINES = ("adagoal", "discover", "random")


def relative_improvement(auc: float | None, baseline: float | None) -> float | None:
    """``100 · (auc − baseline) / baseline`` in percent, or ``None`` where it is undefined (a value missing,
    or a baseline AUC ≤ 0: a baseline that never explored gives no scale to compare against)."""
    if auc is None or baseline is None or baseline <= 0:
        return None
    return 100.0 * (auc - baseline) / baseline
