"""Cost per inserted sample of the radius pseudocount (SPEC §4).

For M in {2, 4, 8}, N in {1e4, 1e5, 1e6}, batch in {1, 64}: microseconds per inserted sample,
measured while inserting the last few thousand samples into a buffer already holding N
(sigma recomputed every 1000 inserts, included), for

* ``grow``: capacity >= N, the buffer grows to N (no evictions);
* ``wrap``: a full FIFO buffer of capacity N (every insert also evicts and decrements),

each the minimum over ``--repeat`` runs on fresh copies of the state (the machine is shared),

plus the index memory (``nbytes()``: the native index's blocks, cells, hash table and position
maps) and the bound of a brute-force scan (N*M*4 bytes / memory bandwidth) and a measured numpy
brute-force insert (scan + increments).  Data: uniform in a box (the standard), and for M = 2 also
trajectory-like data (random-walk episodes from a common start: dense neighbourhoods).  The state
is built with large batches (exact counts, samples inserted one after another in C); the copies
go through pickling (``__getstate__``/``__setstate__``: entries re-inserted in position order).
The native index is compiled on first use (about a second, then cached).

    python bench/bench_pseudocount.py            # N up to 1e6
    python bench/bench_pseudocount.py --quick    # N up to 1e5
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from sun_lightning.replay.pseudocount import RadiusPseudocount

RHO = 0.1
K = 1000


def bandwidth_gbs(gib: float = 1.0, reps: int = 3) -> float:
    a = np.ones(int(gib * 2 ** 30) // 8)
    a.sum()
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / best / 1e9


def make_data(kind: str, n: int, M: int, rng) -> np.ndarray:
    if kind == "uniform":
        return rng.random((n, M), dtype=np.float32)
    if kind == "walk":  # episodes of 500 random-walk steps from the origin
        steps = rng.normal(size=(n, M)).astype(np.float32)
        ep = np.arange(n) // 500
        x = np.cumsum(steps, axis=0)
        starts = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]])
        offs = np.repeat(x[starts] - steps[starts], np.diff(np.r_[starts, n]), axis=0)
        return (x - offs).astype(np.float32)
    raise ValueError(kind)


def build(M: int, N: int, capacity: int, data: np.ndarray) -> tuple[RadiusPseudocount, float]:
    pc = RadiusPseudocount(M, RHO, capacity, sigma_every=K)
    chunk = 100_000
    t0 = time.perf_counter()
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        pc.insert(torch.arange(s, e), torch.from_numpy(data[s:e]))
    return pc, time.perf_counter() - t0


def measure(pc: RadiusPseudocount, start: int, data: np.ndarray, batch: int, n: int,
            capacity: int) -> float:
    xs = torch.from_numpy(data)
    pos = (start + np.arange(n)) % capacity
    pos_t = torch.from_numpy(pos)
    t0 = time.perf_counter()
    for s in range(0, n, batch):
        pc.insert(pos_t[s:s + batch], xs[s:s + batch])
    return (time.perf_counter() - t0) / n * 1e6


def brute_force_us(data: np.ndarray, queries: np.ndarray, reps: int = 20) -> float:
    """numpy brute force (float32, feature-major, in-place): scan, count, increment neighbours."""
    st = data.std(0)
    st = np.maximum(st, np.median(st)).astype(np.float32)
    Z = np.ascontiguousarray((data / st).T)  # [M, N]
    cnt = np.ones(Z.shape[1], np.int32)
    acc = np.empty(Z.shape[1], np.float32)
    buf = np.empty_like(acc)
    t0 = time.perf_counter()
    for q in queries[:reps]:
        z = q / st
        np.subtract(Z[0], z[0], out=acc)
        np.multiply(acc, acc, out=acc)
        for m in range(1, len(z)):
            np.subtract(Z[m], z[m], out=buf)
            np.multiply(buf, buf, out=buf)
            acc += buf
        cnt[np.flatnonzero(acc <= RHO * RHO)] += 1
    return (time.perf_counter() - t0) / min(reps, len(queries)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="N up to 1e5")
    ap.add_argument("--meas", type=int, default=4096, help="samples inserted per measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2,
                    help="measurements per figure (fresh copies of the state); the minimum is shown")
    args = ap.parse_args()
    torch.set_num_threads(1)
    Ns = [10 ** 4, 10 ** 5] if args.quick else [10 ** 4, 10 ** 5, 10 ** 6]
    bw = bandwidth_gbs()
    print(f"memory bandwidth (numpy sum over 1 GiB): {bw:.1f} GB/s; rho={RHO}, sigma every {K}")
    hdr = (f"{'data':8} {'M':>2} {'N':>8} {'B':>3} | {'grow us':>8} {'wrap us':>8} | "
           f"{'MB':>6} | {'scan bound us':>13} {'numpy bf us':>11} | {'nbrs':>6} {'fill s':>6}")
    print(hdr)
    print("-" * len(hdr))
    cases = [("uniform", 2), ("walk", 2), ("uniform", 4), ("uniform", 8)]
    for kind, M in cases:
        for N in Ns:
            rng = np.random.default_rng(args.seed)
            n = args.meas
            data = make_data(kind, N + 2 * n, M, rng)
            base = N - n
            grow_pc, fill_s = build(M, base, N, data)
            # the wrap state: the grow state filled up to N in one bulk batch
            wrap_pc = copy.deepcopy(grow_pc)
            t0 = time.perf_counter()
            wrap_pc.insert(torch.arange(base, N), torch.from_numpy(data[base:N]))
            fill_s += time.perf_counter() - t0
            bound = N * M * 4 / (bw * 1e9) * 1e6
            bf = brute_force_us(data[:N], data[N:N + 20])
            for B in (1, 64):
                t_grow = t_wrap = np.inf
                for _ in range(args.repeat):
                    g = copy.deepcopy(grow_pc)
                    t_grow = min(t_grow, measure(g, base, data[base:N], B, n, N))
                    w = copy.deepcopy(wrap_pc)
                    t_wrap = min(t_wrap, measure(w, N, data[N:N + n], B, n, N))
                nbrs = float(g.counts(torch.arange(base, N)).double().mean())
                mb = max(g.nbytes(), w.nbytes()) / 1e6
                print(f"{kind:8} {M:2d} {N:8.0e} {B:3d} | {t_grow:8.1f} {t_wrap:8.1f} | "
                      f"{mb:6.1f} | {bound:13.1f} {bf:11.1f} | {nbrs:6.0f} {fill_s:6.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
