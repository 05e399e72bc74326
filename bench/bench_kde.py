"""MEGA's kernel density at its pool sizes: this project's torch estimator against scikit-learn's ``KernelDensity``
(mrl's choice) and scipy's ``gaussian_kde`` (what DISCOVER's ``jax.scipy.stats.gaussian_kde`` computes).

Rows, each a fit on n achieved goals and the log density of m candidates, d = 2 (the mazes) and 3 (ArmPush-H):

* DQN variant (mrl): bandwidth 0.1, n = 10 000, m = 100 candidates × 4 envs;
* TD3 variant (DISCOVER): Scott's rule, n = m = 5 000 (point mazes, the arm) and 10 000 (ant mazes).

Each figure is the best of ``--repeat`` calls in milliseconds. scikit-learn is not a dependency of the project:
``pip install scikit-learn`` to get its row.

    python bench/bench_kde.py
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from sun_lightning.goals.density import goal_log_density


def best_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    try:
        from sklearn.neighbors import KernelDensity
    except ImportError:
        KernelDensity = None
    from scipy.stats import gaussian_kde

    print(f"CPU: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    print(f"{'case':<34} {'torch (ms)':>11} {'sklearn (ms)':>13} {'scipy (ms)':>11}")
    rng = np.random.default_rng(0)
    for name, n, m, d, bandwidth in [("DQN: h 0.1, n 10000, m 400", 10000, 400, 2, 0.1),
                                     ("TD3: Scott, n = m = 5000", 5000, 5000, 2, None),
                                     ("TD3: Scott, n = m = 5000, d 3", 5000, 5000, 3, None),
                                     ("TD3 ant: Scott, n = m = 10000", 10000, 10000, 2, None)]:
        sample, goals = rng.normal(size=(n, d)), rng.normal(size=(m, d))
        ts, tg = torch.from_numpy(sample), torch.from_numpy(goals)
        ours = best_ms(lambda: goal_log_density(ts, tg, bandwidth), args.repeat)
        mean, std = sample.mean(0), sample.std(0) + 1e-4
        sk = sp = float("nan")
        if bandwidth is not None and KernelDensity is not None:
            sk = best_ms(lambda: KernelDensity(bandwidth=bandwidth).fit((sample - mean) / std)
                         .score_samples((goals - mean) / std), args.repeat)
        if bandwidth is None:
            sp = best_ms(lambda: gaussian_kde(((sample - mean) / std).T).logpdf(((goals - mean) / std).T), args.repeat)
        print(f"{name:<34} {ours:>11.1f} {sk:>13.1f} {sp:>11.1f}")


if __name__ == "__main__":
    main()
