"""RadiusPseudocount against an independent brute-force reference (SPEC §4)."""

from __future__ import annotations

import copy
import ctypes
import multiprocessing
import os
import pickle

import numpy as np
import pytest
import torch

from sun_lightning import native
from sun_lightning.replay import pseudocount_native
from sun_lightning.replay.pseudocount import RadiusPseudocount


# --------------------------------------------------------------------------- reference
class BruteForceCount:
    """Plain O(N) per insert re-implementation of the documented semantics.

    Batch rule: sigma is recomputed (over the stored set after the batch) when the batch covers a
    global sample number that is a multiple of K; evicted entries decrement surviving
    neighbours; new samples count survivors + other batch samples (+1) and increment survivors.
    A repeated position inside one call splits the call into consecutive batches.
    """

    def __init__(self, M, rho, capacity, num_actions=0, K=1):
        self.M, self.rho, self.cap, self.na, self.K = M, rho, capacity, num_actions, K
        self.store = {}  # slot -> [x (tuple of floats), action, n]
        self.seen = 0
        self.st = [1.0] * M

    def _scale(self, xs):
        sig = []
        for m in range(self.M):
            col = np.array([x[m] for x in xs], np.float64)
            sig.append(0.0 if col.min() == col.max() else float(np.std(col)))
        med = float(np.median(sig))
        st = [max(s, med) for s in sig]
        return [1.0 if s == 0 else s for s in st]

    def _near(self, x, ax, y, ay):
        if self.na and ax != ay:
            return False
        d2 = 0.0
        for m in range(self.M):
            d2 += ((x[m] - y[m]) / self.st[m]) ** 2
        return d2 <= self.rho ** 2

    def insert(self, idx, xs, acts=None):
        idx = [int(i) for i in idx]
        xs = [tuple(float(v) for v in row) for row in xs]
        acts = [0] * len(idx) if acts is None else [int(a) for a in acts]
        start, seen = 0, set()
        for i, s in enumerate(idx):
            if s in seen:
                self._batch(idx[start:i], xs[start:i], acts[start:i])
                start, seen = i, set()
            seen.add(s)
        self._batch(idx[start:], xs[start:], acts[start:])

    def _batch(self, idx, xs, acts):
        B, T = len(idx), self.seen
        evicted = [self.store.pop(s) for s in idx if s in self.store]
        self.seen += B
        if any((T + i) % self.K == 0 for i in range(B)):
            self.st = self._scale([e[0] for e in self.store.values()] + xs)
        for ex, ea, _ in evicted:
            for e in self.store.values():
                if self._near(ex, ea, e[0], e[1]):
                    e[2] -= 1
        new = []
        for i in range(B):
            n = 1
            for e in self.store.values():
                if self._near(xs[i], acts[i], e[0], e[1]):
                    n += 1
                    e[2] += 1
            for j in range(B):
                if j != i and self._near(xs[i], acts[i], xs[j], acts[j]):
                    n += 1
            new.append(n)
        for s, x, a, n in zip(idx, xs, acts, new):
            self.store[s] = [x, a, n]

    def counts(self):
        out = np.zeros(self.cap, np.int64)
        for s, e in self.store.items():
            out[s] = e[2]
        return out


def all_counts(pc, cap):
    return pc.counts(torch.arange(cap)).numpy()


def run_pair(data, batch, rho, cap, K, acts=None, na=0, wrap=True, check_every=1, tune=None,
             positions=None):
    """Feed ``data`` to both implementations (FIFO positions, or ``positions(t, B)``) and compare
    every count, the size and the scale every ``check_every`` calls."""
    M = data.shape[1]
    pc = RadiusPseudocount(M, rho, cap, num_actions=na, sigma_every=K)
    if tune is not None:
        pc._index.tune(**tune)
    ref = BruteForceCount(M, rho, cap, num_actions=na, K=K)
    t, k = 0, 0
    sizes = batch if isinstance(batch, (list, tuple)) else [batch]
    while t < len(data):
        B = min(sizes[k % len(sizes)], len(data) - t)
        k += 1
        if positions is not None:
            idx = positions(t, B)
        else:
            idx = np.arange(t, t + B) % cap if wrap else np.arange(t, t + B)
        a = None if acts is None else acts[t:t + B]
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[t:t + B]),
                  None if a is None else torch.from_numpy(a))
        ref.insert(idx, data[t:t + B], a)
        t += B
        if k % check_every == 0 or t >= len(data):
            np.testing.assert_array_equal(all_counts(pc, cap), ref.counts(), err_msg=f"after {t}")
            assert len(pc) == len(ref.store)
            np.testing.assert_allclose(pc.scale().numpy(), np.array(ref.st, np.float32), rtol=1e-5)
    return pc, ref


ALL_CELLS = dict(box_all=0)  # every query bounds every stored cell (the fallback path)
EAGER_GC = dict(gc_cells=0)  # compact as soon as garbage outweighs live data


# --------------------------------------------------------------------------- random data
@pytest.mark.parametrize("M,rho", [(1, 0.05), (2, 0.3), (3, 0.5), (4, 0.7), (5, 0.9), (8, 1.4)])
@pytest.mark.parametrize("tune", [None, ALL_CELLS])
def test_single_inserts_random(M, rho, tune):
    rng = np.random.default_rng(M)
    data = rng.random((220, M)).astype(np.float32)
    data[:, 0] *= 3.0  # anisotropic: exercises the median floor
    run_pair(data, 1, rho, cap=220, K=1, wrap=False, check_every=37, tune=tune)


@pytest.mark.parametrize("B", [1, 7, 64])
@pytest.mark.parametrize("M", [2, 4, 8])
def test_batched_inserts_with_actions(B, M):
    rng = np.random.default_rng(10 * B + M)
    data = rng.normal(size=(400, M)).astype(np.float32)
    acts = rng.integers(0, 3, 400)
    rho = {2: 0.4, 4: 0.8, 8: 1.5}[M]
    run_pair(data, B, rho, cap=400, K=5, acts=acts, na=3, wrap=False, check_every=3)


@pytest.mark.parametrize("M", [2, 3, 8])
@pytest.mark.parametrize("tune", [None, EAGER_GC])
def test_eviction_wraparound(M, tune):
    rng = np.random.default_rng(100 + M)
    data = rng.random((500, M)) * np.linspace(1, 4, M)
    rho = {2: 0.35, 3: 0.5, 8: 1.4}[M]
    # mixed batch sizes, capacity not a multiple of them, sigma every 13 samples
    run_pair(data, [1, 7, 3, 64], rho, cap=97, K=13, wrap=True, check_every=2, tune=tune)


@pytest.mark.parametrize("M", [1, 3])
def test_tiny_capacity_empties_cells(M):
    rng = np.random.default_rng(200 + M)
    data = rng.random((300, M))
    acts = rng.integers(0, 2, 300)
    # cells empty and refill all the time; eager compaction rebuilds between steps
    pc, _ = run_pair(data, [1, 1, 3, 1, 2], 0.4, cap=10, K=4, acts=acts, na=2, wrap=True,
                     check_every=1, tune=EAGER_GC)
    assert pc.rebuilds > 10


def test_eviction_with_actions_and_dense_neighbourhoods():
    rng = np.random.default_rng(7)
    # random walk: clustered, many neighbours per insert (whole cells inside the ball)
    data = np.cumsum(rng.normal(scale=0.05, size=(600, 2)), axis=0)
    acts = rng.integers(0, 2, 600)
    run_pair(data, [5, 1, 64], 0.3, cap=150, K=10, acts=acts, na=2, wrap=True, check_every=4)


def test_random_positions_swap_remove():
    rng = np.random.default_rng(8)
    data = rng.random((700, 2)) * np.array([1.0, 2.0])
    acts = rng.integers(0, 2, 700)

    def positions(t, B):  # distinct random positions: evictions hit the middle of cells
        return rng.choice(120, size=B, replace=False)

    run_pair(data, [1, 9, 1, 30], 0.5, cap=120, K=11, acts=acts, na=2, positions=positions,
             check_every=1)


def test_sigma_every_larger_than_batches():
    rng = np.random.default_rng(3)
    data = rng.random((500, 3)) * np.array([1.0, 10.0, 0.1])
    run_pair(data, 7, 0.3, cap=500, K=50, wrap=False, check_every=5)


def test_large_batches_and_dense_interior():
    rng = np.random.default_rng(11)
    data = rng.random((1200, 2))
    # batch samples count each other; big balls hold many whole cells
    run_pair(data, [300, 500, 9, 391], 0.35, cap=1200, K=100, wrap=False, check_every=1)


def test_large_batch_eviction_mixed_actions():
    rng = np.random.default_rng(12)
    data = rng.random((1500, 3))
    acts = rng.integers(0, 4, 1500)
    run_pair(data, [400, 3, 500], 0.6, cap=700, K=300, acts=acts, na=4, wrap=True,
             check_every=1)


# --------------------------------------------------------------------------- grid edge cases
@pytest.mark.parametrize("tune", [None, ALL_CELLS])
def test_rebuild_when_scale_grows_and_shrinks(tune):
    rng = np.random.default_rng(13)
    # the spread grows 50x, then (as the FIFO forgets the wide phase) shrinks back
    scale = np.concatenate([np.full(300, 0.02), np.full(300, 1.0), np.full(600, 0.02)])
    data = rng.normal(size=(1200, 2)) * scale[:, None] + np.array([3.0, -2.0])
    pc, _ = run_pair(data, [1, 5, 16], 0.3, cap=300, K=7, wrap=True, check_every=3, tune=tune)
    assert pc.rebuilds >= 4  # grew past the slack at least once, shrank at least once
    assert pc.rebuilds < 1200 // 7 // 4  # but not on every re-standardization


def test_rebuild_keeps_counts_when_scale_drifts_slowly():
    rng = np.random.default_rng(14)
    # slowly widening data: many re-standardizations inside the slack, few rebuilds
    data = rng.normal(size=(900, 3)) * np.linspace(0.5, 2.0, 900)[:, None]
    pc, _ = run_pair(data, 3, 0.4, cap=900, K=3, wrap=False, check_every=10)
    assert 1 <= pc.rebuilds <= 20


def test_dense_data_refines_and_sparse_data_coarsens_the_grid():
    rng = np.random.default_rng(19)
    # a big ball over few cells: > 128 entries per cell, the grid is refined (level < 0)
    pc, _ = run_pair(rng.random((1000, 1)), [1, 50], 2.0, cap=1000, K=50, wrap=False,
                     check_every=5)
    assert pc._index.stats()["level"] < 0
    # a tiny ball: one entry per cell, the grid is coarsened (level > 0)
    pc, _ = run_pair(rng.random((300, 3)), [1, 20], 0.01, cap=300, K=50, wrap=False,
                     check_every=5, tune=dict(gc_cells=16))
    assert pc._index.stats()["level"] > 0


@pytest.mark.parametrize("beyond", [1e-6, 1e-9])
def test_interior_cells_need_their_far_corner_inside(beyond):
    # an entry in a cell's far corner, just beyond rho from the query, while the rest of that
    # cell is inside the ball: the cell must not be counted without distance checks
    rho = 0.625
    pc = RadiusPseudocount(2, rho, 16, sigma_every=10 ** 9)
    ref = BruteForceCount(2, rho, 16, K=10 ** 9)
    prefix = _exact_sigma_one_prefix().astype(np.float64)  # st = 1 from here on
    pc.insert(torch.arange(4), torch.from_numpy(prefix))
    ref.insert(range(4), prefix)
    dims, o, L, _ = pc._index.geometry
    corner = o + L  # upper corner of cell (0, 0)
    y = np.nextafter(corner, -np.inf)  # inside that cell, at its far corner
    d = rho * (1 + beyond) / np.sqrt(2.0)
    x = y - d  # the cell's far corner is ~rho (1 + beyond) away from x, its near part inside
    pts = np.stack([y, x, (x + y) / 2, y - np.array([L[0] / 3, L[1] / 2])])
    for t, p in enumerate(pts, start=4):
        pc.insert(torch.tensor([t]), torch.from_numpy(p[None]))
        ref.insert([t], p[None])
    np.testing.assert_array_equal(all_counts(pc, 16), ref.counts())
    assert ref.counts()[4] == 3  # y does not count x: it is just beyond rho


def test_far_cells_are_clamped_into_edge_cells():
    rng = np.random.default_rng(15)
    # sigma is computed once, over a tight first batch: cells of ~1e-4, then points 1e9-1e15
    # away land in clamped edge cells (beyond 2^40 cells); clusters there must still count
    first = rng.normal(scale=1e-3, size=(20, 2))
    far = []
    for base in (1e9, -1e12, 3e15, -4e15):
        c = np.array([base, -base / 3])
        far.append(c + rng.integers(0, 3, size=(40, 2)) * np.spacing(np.abs(c)) * 2)
    data = np.concatenate([first] + far)
    data[20:] = data[20:][rng.permutation(160)]
    acts = rng.integers(0, 2, 180)
    for rho in (0.0, 0.5, 1e5):
        run_pair(data, [20, 1, 3, 7], rho, cap=90, K=10 ** 9, acts=acts, na=2, wrap=True,
                 check_every=1)


def test_many_cells_grow_the_hash_table():
    rng = np.random.default_rng(16)
    # small rho over spread data: thousands of cells (table regrowth, tag collisions)
    data = rng.random((1200, 2))
    pc, _ = run_pair(data, [500, 1, 64], 0.005, cap=1200, K=400, wrap=False, check_every=10)
    assert pc._index.stats()["cells"] > 800


@pytest.mark.parametrize("M", [6, 9])
def test_wide_goals_grid_the_widest_features(M):
    rng = np.random.default_rng(17 + M)
    # two features have a tiny sigma (floored by the median: sigma / st < 1), the others not;
    # then the roles swap, and the spread grows 3x: the rebuild must grid other features
    n = 300
    w = np.ones(M)
    w[[0, 3]] = 1e-3
    w2 = np.ones(M)
    w2[[1, 2]] = 1e-3
    data = rng.normal(size=(3 * n, M)) * np.concatenate(
        [np.tile(w * 3.0, (n, 1)), np.tile(w2, (n, 1)), np.tile(w2 * 3.0, (n, 1))])
    pc, _ = run_pair(data, [1, 16], 1.5, cap=200, K=5, wrap=True, check_every=4)
    dims = pc._index.geometry[0].tolist()
    assert len(dims) == 4 and 1 not in dims and 2 not in dims


def test_rho_zero_counts_exact_duplicates_far_from_origin():
    rng = np.random.default_rng(6)
    # integer tiles: with rho = 0 the pseudocount is the exact visit count of (tile, action)
    data = rng.integers(0, 4, (300, 2)).astype(np.float64) + 1e6
    acts = rng.integers(0, 2, 300)
    pc, ref = run_pair(data, [1, 7, 64], 0.0, cap=120, K=10, acts=acts, na=2, wrap=True,
                       check_every=3)
    stored = {}
    for s_, (x, a, n) in ref.store.items():
        stored.setdefault((x, a), []).append(s_)
    for slots in stored.values():
        assert (pc.counts(torch.tensor(slots)) == len(slots)).all()


def test_repeated_positions_within_a_batch():
    rng = np.random.default_rng(5)
    data = rng.random((120, 2))
    pc = RadiusPseudocount(2, 0.5, 10, sigma_every=3)
    ref = BruteForceCount(2, 0.5, 10, K=3)
    for t in range(0, 120, 12):
        idx = rng.integers(0, 10, 12)
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[t:t + 12]))
        ref.insert(idx, data[t:t + 12])
        np.testing.assert_array_equal(all_counts(pc, 10), ref.counts())


def test_deepcopy_and_pickle_continue_identically():
    rng = np.random.default_rng(18)
    data = rng.random((400, 3))
    acts = rng.integers(0, 2, 400)
    pc = RadiusPseudocount(3, 0.4, 150, num_actions=2, sigma_every=9)
    ref = BruteForceCount(3, 0.4, 150, num_actions=2, K=9)
    for t in range(0, 200, 5):
        idx = np.arange(t, t + 5) % 150
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[t:t + 5]),
                  torch.from_numpy(acts[t:t + 5]))
        ref.insert(idx, data[t:t + 5], acts[t:t + 5])
    copies = [copy.deepcopy(pc), pickle.loads(pickle.dumps(pc))]
    for t in range(200, 400):
        for p in [pc] + copies:
            p.insert(torch.tensor([t % 150]), torch.from_numpy(data[t:t + 1]),
                     torch.tensor([acts[t]]))
        ref.insert([t % 150], data[t:t + 1], acts[t:t + 1])
    for p in [pc] + copies:
        np.testing.assert_array_equal(all_counts(p, 150), ref.counts())
        assert len(p) == len(ref.store)
        assert torch.equal(p.scale(), pc.scale())


# --------------------------------------------------------------------------- ties at rho
def _exact_sigma_one_prefix(scale=1.0):
    # four points with mean 0 and population std exactly `scale` in both features
    return np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]], np.float32) * np.float32(scale)


# scale 105: x * (1 / st) rounds differently from x / st, so that some ties at exactly rho look
# beyond rho to the native prefilter (multiplication by 1 / st); it must leave them to the exact
# formula
@pytest.mark.parametrize("scale", [1.0, 105.0])
@pytest.mark.parametrize("tune", [None, ALL_CELLS])
@pytest.mark.parametrize("B", [1, 5])
def test_ties_exactly_at_rho(scale, tune, B):
    rho = 0.625  # 5/8: (3/8, 4/8) is at distance exactly rho, all values exact in float32
    pts = [[0.0, 0.0], [0.375, 0.5], [0.625, 0.0], [0.0, -0.625], [-0.375, -0.5],
           [0.625 + 2 ** -20, 0.0], [0.0, 0.625 + 2 ** -20], [0.75, 0.5], [0.375, 1.0],
           [0.0, 0.0], [-0.625, 0.0], [1.0, 0.5], [0.25, -0.125]]
    data = np.concatenate([_exact_sigma_one_prefix(scale), np.array(pts, np.float32) * scale])
    # K huge: sigma is computed once, over the first batch (the +-scale prefix): exactly scale
    pc = RadiusPseudocount(2, rho, 64, sigma_every=10 ** 9)
    if tune is not None:
        pc._index.tune(**tune)
    ref = BruteForceCount(2, rho, 64, K=10 ** 9)
    pc.insert(torch.arange(4), torch.from_numpy(data[:4]))
    ref.insert(range(4), data[:4])
    assert pc.scale().tolist() == [scale, scale]
    for t in range(4, len(data), B):
        idx = np.arange(t, min(t + B, len(data)))
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[idx]))
        ref.insert(idx, data[idx])
    got = all_counts(pc, 64)
    np.testing.assert_array_equal(got, ref.counts())
    # hand-checked: the origin sees (3/8,1/2), (5/8,0), (0,-5/8), (-3/8,-1/2), the second origin,
    # (-5/8,0), (1/4,-1/8) and itself; not the points 2^-20 beyond rho
    assert got[4] == 8


@pytest.mark.parametrize("scale", [1.0, 105.0])
def test_ties_on_cell_borders_with_many_neighbours(scale):
    # a lattice at spacing rho / 4 (exact binary fractions, st exactly `scale`): many pairs at
    # exactly rho, many cells entirely inside the ball, and points on cell borders
    rho = 0.5
    g = np.arange(-8, 9) * 0.125 * scale
    lattice = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    data = np.concatenate([_exact_sigma_one_prefix(scale), lattice]).astype(np.float64)
    for B in (1, 17):
        pc = RadiusPseudocount(2, rho, 400, sigma_every=10 ** 9)
        ref = BruteForceCount(2, rho, 400, K=10 ** 9)
        pc.insert(torch.arange(4), torch.from_numpy(data[:4]))
        ref.insert(range(4), data[:4])
        for t in range(4, len(data), B):
            idx = np.arange(t, min(t + B, len(data)))
            pc.insert(torch.from_numpy(idx), torch.from_numpy(data[idx]))
            ref.insert(idx, data[idx])
        assert pc.scale().tolist() == [scale, scale]
        np.testing.assert_array_equal(all_counts(pc, 400), ref.counts())


def test_tie_hand_counts():
    rho = 0.625
    data = np.concatenate([_exact_sigma_one_prefix(),
                           np.array([[0, 0], [0.375, 0.5], [0.625 + 2 ** -20, 0]], np.float32)])
    pc = RadiusPseudocount(2, rho, 16, sigma_every=10 ** 9)
    pc.insert(torch.arange(4), torch.from_numpy(data[:4]))
    for t in range(4, 7):
        pc.insert(torch.tensor([t]), torch.from_numpy(data[t:t + 1]))
    c = pc.counts(torch.arange(4, 7)).tolist()
    # origin: itself + (3/8,1/2) at exactly rho; (5/8+eps,0) is beyond rho
    # (3/8,1/2) to (5/8+eps,0): (1/4+eps)^2 + 1/4 < rho^2 -> neighbours
    assert c == [2, 3, 2]


# --------------------------------------------------------------------------- standardization
def test_zero_sigma_features_and_median_zero():
    rng = np.random.default_rng(1)
    data = np.zeros((200, 3))
    data[:, 0] = rng.random(200)
    data[:, 1] = 2.5  # constant
    data[:, 2] = -1.0  # constant -> median sigma is 0 -> scale 1 for these two
    pc, ref = run_pair(data, [1, 9], 0.05, cap=200, K=7, wrap=False, check_every=5)
    st = pc.scale().numpy()
    assert st[1] == 1.0 and st[2] == 1.0
    np.testing.assert_allclose(st[0], np.std(data[:, 0]), rtol=1e-6)


def test_zero_sigma_feature_floored_by_median():
    rng = np.random.default_rng(2)
    data = np.zeros((150, 3))
    data[:, 0] = rng.random(150) * 0.1
    data[:, 1] = 0.1  # constant, not exactly representable: sigma must still be exactly 0
    data[:, 2] = rng.random(150) * 4.0
    pc, ref = run_pair(data, 3, 0.5, cap=150, K=1, wrap=False, check_every=10)
    st = pc.scale().numpy()
    # sigma = (s0, 0, s2): median = s0, so feature 1 is floored to s0 (not 1)
    np.testing.assert_allclose(st[1], st[0], rtol=1e-6)
    np.testing.assert_allclose(st[0], np.std(data[:, 0]), rtol=1e-6)


def test_median_floor_effect():
    rng = np.random.default_rng(4)
    data = rng.random((300, 3)) * np.array([1.0, 1e-3, 5.0])
    pc, ref = run_pair(data, 4, 0.3, cap=300, K=1, wrap=False, check_every=15)
    sig = data.std(0)
    np.testing.assert_allclose(pc.scale().numpy(), np.maximum(sig, np.median(sig)), rtol=1e-5)
    # the tiny feature is floored: it barely affects neighbourhoods
    assert pc.scale()[1] == pc.scale()[0]


# --------------------------------------------------------------------------- api
def test_api_shapes_devices_and_errors():
    pc = RadiusPseudocount(2, 0.1, 8, num_actions=2, sigma_every=2)
    assert len(pc) == 0
    assert pc.scale().tolist() == [1.0, 1.0]
    pc.insert(torch.tensor([0, 1, 2]), torch.tensor([[0.0, 0.0], [1.0, 2.0], [0.0, 0.01]]),
              torch.tensor([1, 1, 0]))
    assert len(pc) == 3
    c = pc.counts(torch.tensor([0, 2, 5]))
    assert c.dtype == torch.int64 and c.tolist() == [1, 1, 0]
    x = torch.tensor([[1.0, 4.0]], dtype=torch.float64)
    s = pc.standardize(x)
    assert s.dtype == torch.float64
    torch.testing.assert_close(s, x / pc.scale().double())
    with pytest.raises(ValueError):
        pc.insert(torch.tensor([3]), torch.zeros(1, 2))  # missing action
    with pytest.raises(IndexError):
        pc.insert(torch.tensor([8]), torch.zeros(1, 2), torch.tensor([0]))
    with pytest.raises(ValueError):
        pc.insert(torch.tensor([3]), torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    pc2 = RadiusPseudocount(2, 0.1, 8)
    with pytest.raises(ValueError):
        pc2.insert(torch.tensor([0]), torch.zeros(1, 2), torch.tensor([0]))
    # numpy inputs and float64 / float16 tensors are accepted too
    pc2.insert(np.array([1]), np.array([[0.0, 0.0]]))
    pc2.insert(torch.tensor([2]), torch.tensor([[0.0, 0.0]], dtype=torch.float16))
    pc2.insert(torch.tensor([[3], [4]]), torch.zeros(2, 2, dtype=torch.float64))
    assert pc2.counts(torch.tensor([1, 2, 3, 4])).tolist() == [4, 4, 4, 4]
    assert pc2.counts(torch.tensor([[1, 2]])).shape == (1, 2)


def test_counts_are_o1_reads_and_memory_small():
    rng = np.random.default_rng(0)
    pc = RadiusPseudocount(4, 0.1, 50_000, sigma_every=1000)
    x = torch.from_numpy(rng.random((50_000, 4)).astype(np.float32))
    pc.insert(torch.arange(50_000), x)
    assert len(pc) == 50_000
    assert pc.nbytes() < 150e6 * 50_000 / 1e6
    assert (pc.counts(torch.arange(50_000)) >= 1).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors():
    rng = np.random.default_rng(9)
    data = rng.random((300, 2)).astype(np.float32)
    pc = RadiusPseudocount(2, 0.3, 100, sigma_every=7, device="cuda")
    ref = BruteForceCount(2, 0.3, 100, K=7)
    for t in range(0, 300, 10):
        idx = np.arange(t, t + 10) % 100
        pc.insert(torch.from_numpy(idx).cuda(), torch.from_numpy(data[t:t + 10]).cuda())
        ref.insert(idx, data[t:t + 10])
    c = pc.counts(torch.arange(100, device="cuda"))
    assert c.device.type == "cuda"
    np.testing.assert_array_equal(c.cpu().numpy(), ref.counts())
    assert pc.scale().device.type == "cuda"
    assert pc.standardize(torch.ones(3, 2, device="cuda")).device.type == "cuda"


@pytest.mark.slow
@pytest.mark.parametrize("M", [2, 4, 8])
def test_random_walk_long_against_reference(M):
    rng = np.random.default_rng(20 + M)
    data = np.cumsum(rng.normal(size=(3000, M)), axis=0)
    acts = rng.integers(0, 3, 3000)
    run_pair(data, [64, 1, 7], {2: 0.1, 4: 0.3, 8: 0.6}[M], cap=1000, K=50, acts=acts, na=3,
             wrap=True, check_every=25)


# --------------------------------------------------------------------------- native build
def test_native_build_into_fresh_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SUN_LIGHTNING_CACHE_DIR", str(tmp_path))
    cc = native.compiler("test")
    src = pseudocount_native.LIBRARY.source.read_bytes()
    lib = native.build("_pseudocount", cc, src)
    assert lib.parent == tmp_path and lib.exists()
    assert [p.name for p in tmp_path.iterdir()] == [lib.name]  # no temporary file left behind
    mtime = lib.stat().st_mtime_ns
    assert native.build("_pseudocount", cc, src) == lib and lib.stat().st_mtime_ns == mtime
    # another source (or compiler, flags) gets another library
    assert native.library_name("_pseudocount", cc, src + b"\n/* edited */\n") != lib.name


def test_native_build_without_compiler_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(pseudocount_native.LIBRARY, "_lib", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(native.NativeError, match="RadiusPseudocount.*C compiler"):
        pseudocount_native.load_library()


def _build_in(cache_dir):
    os.environ["SUN_LIGHTNING_CACHE_DIR"] = cache_dir
    return str(pseudocount_native.LIBRARY.path())


@pytest.mark.slow
def test_native_build_concurrent_processes(tmp_path):
    # several processes compiling at once: each writes its own temporary file and moves it into
    # place atomically, so all of them load a complete library
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        paths = pool.map(_build_in, [str(tmp_path)] * 3)
    assert len(set(paths)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(paths[0])]
    ctypes.CDLL(paths[0]).pc_new  # loads and exports the API
