"""Learners: networks, losses and optimizers behind one interface (:mod:`~sun_lightning.learners.base`)."""
