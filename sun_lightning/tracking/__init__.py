"""Experiment tracking: run naming (:mod:`.naming`), the embedded MLflow store (:mod:`.store`) and the Lightning
logger with its durable queue (:mod:`.logger`).

The names of the flat module of earlier versions (``sun_lightning.tracking.run_name``, ``.prepare_store``, ...)
still resolve here, each on first use (:data:`sun_lightning._moved.MOVED_NAMES`), so that importing run naming
does not import MLflow.
"""
