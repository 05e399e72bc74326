"""What a config says of an environment, before the environment is built: a gridworld's map (:mod:`.layout`) and
the goal space of a gymnasium id (:mod:`.goal`).

numpy and gymnasium only, unlike :mod:`sun_lightning.envs` (whose import registers every environment, with torch and
MuJoCo): the pre-check (:mod:`sun_lightning.run.precheck`) judges ``data.layout`` and ``data.goal`` with the same
functions the environments are built with, in a fraction of a second.
"""
