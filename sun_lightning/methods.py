"""The paper's methods (SPEC §3) as command-line overrides of an environment config.

One place maps a method's name to the ``python -m sun_lightning fit`` arguments
that select it, so the README table, the comparison runner
(:mod:`sun_lightning.compare`) and the speed benchmark agree. The ensemble
baselines swap the config's learner for its 4-critic ensemble: the DQN one on
discrete actions, the TD3 one (with DISCOVER's β = 1, paper appendix
"Algorithm-specific") on continuous actions.
"""

from __future__ import annotations

from pathlib import Path

import yaml

TD3 = "sun_lightning.learners.td3.TD3SVF"
ENSEMBLE = {"sun_lightning.learners.dqn.DQNSVF": "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF",
            TD3: "sun_lightning.learners.ensemble_td3.EnsembleTD3SVF"}

METHODS: dict[str, tuple[str, ...]] = {
    "sun": (),
    "sun_per_step": ("--data.selector", "sun_lightning.goals.SUNPerStep"),
    "sun_episodic": ("--data.selector", "sun_lightning.goals.variants.SUNEpisodic"),
    "sun_additive": ("--data.selector", "sun_lightning.goals.variants.SUNAdditive"),
    "novelty_only": ("--data.selector", "sun_lightning.goals.variants.NoveltyOnly"),
    "reachability_only": ("--data.selector", "sun_lightning.goals.variants.ReachabilityOnly"),
    "discover": ("--data.selector", "sun_lightning.goals.ensemble.DISCOVER"),
    "adagoal": ("--data.selector", "sun_lightning.goals.ensemble.AdaGoal"),
    "random": ("--data.selector", "sun_lightning.goals.RandomActions"),
}
"""Method name → the arguments that select it (SUN adaptive is the configs' default)."""


def method_args(name: str, config: str | Path | None = None) -> tuple[str, ...]:
    """The override arguments of method ``name`` on the environment config ``config``.

    Args:
        name: a key of :data:`METHODS`.
        config: the environment config; its learner decides the ensemble baselines' learner
            (the DQN variant's when ``None``).

    Raises:
        ValueError: naming the unknown method and the known ones, or a config whose learner has no ensemble.
    """
    try:
        args = METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}") from None
    if name not in ("discover", "adagoal"):
        return args
    learner = "sun_lightning.learners.dqn.DQNSVF"
    if config is not None:
        model = yaml.safe_load(Path(config).read_text()).get("model") or {}
        learner = model.get("class_path", learner) if isinstance(model, dict) else learner
    if learner not in ENSEMBLE:
        raise ValueError(f"{name} needs an ensemble of the config's learner {learner!r}; known: {', '.join(ENSEMBLE)}")
    beta = ("--data.selector.beta", "1.0") if learner == TD3 and name == "discover" else ()
    return ("--model", ENSEMBLE[learner], *args, *beta)
