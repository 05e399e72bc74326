"""Shared test set-up: the default run spreads the test files over the machine's cores (pytest-xdist,
``-n auto --dist worksteal`` in pyproject.toml); each worker then gets its share of the cores for torch and for
the fits its tests start as subprocesses, so that two workers do not fight over the same cores' threads."""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        import torch

        torch.set_num_threads(share)
