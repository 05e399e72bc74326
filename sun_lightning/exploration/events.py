"""What the exploration loop announces, and who hears it.

Three topics, each a list of listeners called in the order they subscribed. All of them fire after the update of a
training step (:mod:`~sun_lightning.exploration.prefetch`), in this order:

- ``trained``: the job's env frame count, once per training step, after its update and before the env steps on
  (checkpoints are written on their period there, and Ctrl-C stops the run);
- ``goals``: a step's goals (:data:`~sun_lightning.exploration.stats.GOAL_VIEW`, each ``[B]``) on every vector step
  where an env selected or reached a goal, before that step's ``frames``;
- ``frames``: the job's env frame count, after every vector step (evaluation, logging, heatmaps and the progress bar
  keep their every-N-frames schedules on it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TOPICS = ("trained", "goals", "frames")


class Events:
    """Subscribe, unsubscribe and emit, per topic (:data:`TOPICS`)."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[Any], None]]] = {topic: [] for topic in TOPICS}

    def subscribe(self, topic: str, listener: Callable[[Any], None]) -> None:
        """Add ``listener`` to ``topic`` (once: subscribing it again changes nothing)."""
        listeners = self._topic(topic)
        if listener not in listeners:
            listeners.append(listener)

    def unsubscribe(self, topic: str, listener: Callable[[Any], None]) -> None:
        """Remove ``listener`` from ``topic`` if it is there."""
        listeners = self._topic(topic)
        if listener in listeners:
            listeners.remove(listener)

    def heard(self, topic: str) -> bool:
        """Whether anyone listens to ``topic`` (the loop skips building what nobody reads)."""
        return bool(self._topic(topic))

    def emit(self, topic: str, payload: Any) -> None:
        for listener in self._topic(topic):
            listener(payload)

    def _topic(self, topic: str) -> list[Callable[[Any], None]]:
        try:
            return self._listeners[topic]
        except KeyError:
            raise ValueError(f"unknown event topic {topic!r}; the topics are {', '.join(TOPICS)}") from None
