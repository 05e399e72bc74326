"""SUN (Successor-to-Novelty) exploration on PyTorch Lightning; the map of the packages is docs/architecture.md."""

from sun_lightning import _moved

_moved.install(_moved.MOVED, _moved.MOVED_NAMES)
