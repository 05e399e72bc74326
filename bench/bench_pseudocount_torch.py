"""Native vs pure-torch radius pseudocount (SPEC §4): microseconds per inserted sample.

For N in {1e4, 1e5}, M in {2, 4}, batch in {4, 64}: a full FIFO buffer of capacity N (every
insert also evicts and decrements; sigma recomputed every 1000 samples, included), uniform data,
rho = 0.1.  The native state is built with one large insert; the torch one is a copy of it (same
entries, counts and moments: building it by brute force would cost O(N^2)).  Each figure is the
best of ``--repeat`` timed runs of ``--budget`` seconds at most, on copies of the state.
Torch runs on one thread (the native index is single-threaded) unless ``--threads`` says
otherwise; ``--device cuda`` times the torch implementation on the GPU.

    python bench/bench_pseudocount_torch.py [--quick] [--device cuda]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from sun_lightning.replay.pseudocount import RadiusPseudocount
from sun_lightning.replay.pseudocount_torch import TorchRadiusPseudocount

RHO, K = 0.1, 1000


def torch_copy(nat: RadiusPseudocount, device: str) -> TorchRadiusPseudocount:
    """A TorchRadiusPseudocount holding exactly the native state (entries, counts, moments)."""
    tor = TorchRadiusPseudocount(nat.goal_dim, nat.rho, nat.capacity, nat.num_actions,
                                 nat.sigma_every, device)
    slots, x, a, cnt = nat._index.export()
    s = torch.from_numpy(slots).to(device)
    tor._x[s] = torch.from_numpy(x).to(device)
    tor._a[s] = torch.from_numpy(a).to(device, torch.int32)
    tor._cnt[s] = torch.from_numpy(cnt).to(device)
    tor._occ[slots] = True
    tor._hi = int(slots.max()) + 1 if len(slots) else 0
    tor._n, tor._seen = len(nat), nat._seen
    tor._moments = copy.deepcopy(nat._moments)
    tor._sigma, tor._st = nat._sigma.copy(), nat._st.copy()
    tor._st_dev = torch.from_numpy(tor._st.copy()).to(device)
    return tor


def time_inserts(pc, data, B: int, start: int, budget: float, sync) -> float:
    """Microseconds per sample of B-sample inserts at FIFO positions from ``start``."""
    n = 0
    t0 = time.perf_counter()
    while True:
        idx = torch.arange(start + n, start + n + B) % pc.capacity
        pc.insert(idx, data[n:n + B])
        n += B
        sync()
        if time.perf_counter() - t0 > budget or n + B > len(data):
            break
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1e4 only")
    ap.add_argument("--device", default="cpu", help="device of the torch implementation")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per timed run at most")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, torch device {dev}, {torch.get_num_threads()} thread(s); "
          f"us per inserted sample, full FIFO buffer of N (rho={RHO}, sigma every {K})")
    print(f"{'N':>8} {'M':>2} {'B':>3} {'native':>10} {'torch':>10} {'torch/native':>13}")
    for N in ([10 ** 4] if args.quick else [10 ** 4, 10 ** 5]):
        for M in (2, 4):
            base = RadiusPseudocount(M, RHO, N, sigma_every=K)
            base.insert(torch.arange(N), torch.from_numpy(rng.random((N, M), dtype=np.float32)))
            tbase = torch_copy(base, args.device)
            assert torch.equal(tbase.counts(torch.arange(N)).cpu(), base.counts(torch.arange(N)))
            data = torch.from_numpy(rng.random((8192, M), dtype=np.float32))
            for B in (4, 64):
                nat = min(time_inserts(copy.deepcopy(base), data, B, N, args.budget, lambda: 0)
                          for _ in range(args.repeat))
                tor = min(time_inserts(copy.deepcopy(tbase), data.to(dev), B, N, args.budget,
                                       sync) for _ in range(args.repeat))
                print(f"{N:>8} {M:>2} {B:>3} {nat:>10.2f} {tor:>10.1f} {tor / nat:>12.0f}x",
                      flush=True)


if __name__ == "__main__":
    main()
