"""The paper's methods (SPEC §3) as command-line overrides of an environment config.

One place maps a method's name to the ``python -m sun_lightning fit`` arguments
that select it, so the README table, the comparison runner
(:mod:`sun_lightning.compare`) and the speed benchmark agree. The ensemble
baselines swap the config's learner for its 4-critic ensemble: the DQN one on
discrete actions, the TD3 one on continuous actions.

``discover`` is DISCOVER as the paper ran it on each variant: on discrete actions the
paper's own PyTorch code (raw values, μ + 10σ, :class:`~sun_lightning.goals.ensemble.DISCOVER`);
on continuous actions the official TD3 code the paper's GCRL runs used (values on the
distance scale, one shared pool, the adapted weight on μ:
:class:`~sun_lightning.goals.discover.DISCOVERTD3`, pool 10 000 on the ant mazes as in
its presets, 5 000 elsewhere). ``discover_raw`` is the paper's formula taken literally,
μ + β σ of the raw values with β = 1 on continuous actions (paper appendix
"Algorithm-specific"; β = 10 on discrete ones, there the same as ``discover``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

TD3 = "sun_lightning.learners.td3.TD3SVF"
DISCOVER_TD3 = "sun_lightning.goals.discover.DISCOVERTD3"
#: mrl's ``num_sampled_ags`` (``experiments/mega/train_mega.py`` line 309): MEGA's candidates per env on DQN.
MRL_CANDIDATES = 100
#: Methods whose rule has a class of its own on the TD3 variant (no ensemble): method → that class.
TD3_VARIANT = {"mega": "sun_lightning.goals.mega.MEGATD3", "mega_pseudocount": "sun_lightning.goals.mega.MEGACountTD3"}
#: DISCOVER's pool of candidates (``num_goals`` of its ``scripts/train.sh`` presets) where it is not 5000.
DISCOVER_POOL = {"sun_lightning/AntMazeS-v0": 10000, "sun_lightning/AntMazeH-v0": 10000}
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
    "discover_raw": ("--data.selector", "sun_lightning.goals.ensemble.DISCOVERRaw"),
    "adagoal": ("--data.selector", "sun_lightning.goals.ensemble.AdaGoal"),
    "mega": ("--data.selector", "sun_lightning.goals.mega.MEGA"),
    "mega_pseudocount": ("--data.selector", "sun_lightning.goals.mega.MEGACount"),
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
    if name in TD3_VARIANT:
        return _td3_variant(name, args, config)
    if name not in ("discover", "discover_raw", "adagoal"):
        return args
    learner, config_data = _config_of(config)
    if learner not in ENSEMBLE:
        raise ValueError(f"{name} needs an ensemble of the config's learner {learner!r}; known: {', '.join(ENSEMBLE)}")
    if learner == TD3 and name == "discover":
        pool = DISCOVER_POOL.get(config_data.get("env_id"), 5000)
        args = ("--data.selector", DISCOVER_TD3, "--data.selector.num_candidates", str(pool))
    elif learner == TD3 and name == "discover_raw":
        args = (*args, "--data.selector.beta", "1.0")
    return ("--model", ENSEMBLE[learner], *args)


def _config_of(config: str | Path | None) -> tuple[str, dict]:
    """The learner class path (the DQN variant's when ``None``) and the ``data`` section of an env config."""
    if config is None:
        return "sun_lightning.learners.dqn.DQNSVF", {}
    loaded = yaml.safe_load(Path(config).read_text()) or {}
    model = loaded.get("model") or {}
    learner = model.get("class_path", "sun_lightning.learners.dqn.DQNSVF") if isinstance(model, dict) else ""
    return learner, loaded.get("data") or {}


def _td3_variant(name: str, args: tuple[str, ...], config: str | Path | None) -> tuple[str, ...]:
    """MEGA's arguments: mrl's rule on the DQN variant, DISCOVER's on TD3 (its pool 10 000 on the ant mazes)."""
    learner, data = _config_of(config)
    if learner != TD3:  # the candidates named: a class swapped in on the command line keeps the default rule's 256
        return (*args, "--data.selector.num_candidates", str(MRL_CANDIDATES))
    pool = str(DISCOVER_POOL.get(data.get("env_id"), 5000))
    return ("--data.selector", TD3_VARIANT[name], "--data.selector.num_candidates", pool,
            "--data.selector.kde_samples", pool)
