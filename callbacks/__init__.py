"""The callbacks' earlier import path: ``callbacks.<module>`` is :mod:`sun_lightning.callbacks`'s module of that name
(saved ``config.yaml`` files name these paths; :mod:`sun_lightning._moved` resolves them)."""

import sun_lightning  # noqa: F401  (installs the resolver of the earlier module names)
