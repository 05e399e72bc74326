"""The callbacks' earlier import path: ``callbacks.<module>`` is :mod:`sun_lightning.callbacks`'s module of that name
(saved ``config.yaml`` files name these paths). The package holds no code: importing ``sun_lightning`` installs
:mod:`sun_lightning._moved`, whose table resolves ``callbacks.*``."""

import sun_lightning  # noqa: F401  (installs the resolver of the earlier names)
