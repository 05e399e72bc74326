"""The paper's methods (SPEC §3) as command-line overrides of an environment config.

One place maps a method's name to the ``python -m sun_lightning fit`` arguments
that select it, so the README table, the comparison runner
(:mod:`sun_lightning.compare`) and the speed benchmark agree.
"""

from __future__ import annotations

ENSEMBLE_MODEL = ("--model", "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF")

METHODS: dict[str, tuple[str, ...]] = {
    "sun": (),
    "sun_per_step": ("--data.selector", "sun_lightning.goals.SUNPerStep"),
    "sun_episodic": ("--data.selector", "sun_lightning.goals.variants.SUNEpisodic"),
    "sun_additive": ("--data.selector", "sun_lightning.goals.variants.SUNAdditive"),
    "novelty_only": ("--data.selector", "sun_lightning.goals.variants.NoveltyOnly"),
    "reachability_only": ("--data.selector", "sun_lightning.goals.variants.ReachabilityOnly"),
    "discover": (*ENSEMBLE_MODEL, "--data.selector", "sun_lightning.goals.ensemble.DISCOVER"),
    "adagoal": (*ENSEMBLE_MODEL, "--data.selector", "sun_lightning.goals.ensemble.AdaGoal"),
    "random": ("--data.selector", "sun_lightning.goals.RandomActions"),
}
"""Method name → the arguments that select it (SUN adaptive is the configs' default)."""


def method_args(name: str) -> tuple[str, ...]:
    """The override arguments of method ``name``.

    Raises:
        ValueError: naming the unknown method and the known ones.
    """
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}") from None
