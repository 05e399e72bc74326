"""The methods' names in tables and legends, and what a cell that does not apply reads."""

from __future__ import annotations

#: The methods' names in tables and legends (keys of ``sun_lightning.methods.METHODS``; the README's names).
METHOD_LABELS = {"sun": "SUN adaptive", "sun_per_step": "SUN per-step", "sun_episodic": "SUN episodic",
                 "sun_additive": "SUN additive", "novelty_only": "novelty only",
                 "reachability_only": "reachability only", "discover": "DISCOVER",
                 "discover_raw": "DISCOVER (raw values)", "adagoal": "AdaGoal",
                 "mega": "MEGA", "mega_pseudocount": "MEGA (pseudocount)", "random": "Random"}
NA = "n/a"


def label(method: str) -> str:
    """A method's name in tables and legends."""
    return METHOD_LABELS.get(method, method)
