"""RadiusPseudocount against an independent brute-force reference (SPEC §4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sun_lightning.replay import pseudocount as pc_module
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


def run_pair(data, batch, rho, cap, K, acts=None, na=0, wrap=True, tail_max=16, check_every=1):
    M = data.shape[1]
    pc = RadiusPseudocount(M, rho, cap, num_actions=na, sigma_every=K, tail_max=tail_max)
    ref = BruteForceCount(M, rho, cap, num_actions=na, K=K)
    t, k = 0, 0
    sizes = batch if isinstance(batch, (list, tuple)) else [batch]
    while t < len(data):
        B = min(sizes[k % len(sizes)], len(data) - t)
        k += 1
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


@pytest.fixture
def split_always(monkeypatch):
    """Count interior cells by range length even for few candidates (small test buffers)."""
    monkeypatch.setattr(pc_module, "_SPLIT", -1)


# --------------------------------------------------------------------------- random data
@pytest.mark.parametrize("M,rho", [(1, 0.05), (2, 0.3), (3, 0.5), (4, 0.7), (5, 0.9), (8, 1.4)])
@pytest.mark.parametrize("split", [False, True])
def test_single_inserts_random(M, rho, split, monkeypatch):
    if split:
        monkeypatch.setattr(pc_module, "_SPLIT", -1)
    rng = np.random.default_rng(M)
    data = rng.random((220, M)).astype(np.float32)
    data[:, 0] *= 3.0  # anisotropic: exercises the median floor
    run_pair(data, 1, rho, cap=220, K=1, wrap=False, check_every=37)


@pytest.mark.parametrize("B", [1, 7, 64])
@pytest.mark.parametrize("M", [2, 4, 8])
def test_batched_inserts_with_actions(B, M):
    rng = np.random.default_rng(10 * B + M)
    data = rng.normal(size=(400, M)).astype(np.float32)
    acts = rng.integers(0, 3, 400)
    rho = {2: 0.4, 4: 0.8, 8: 1.5}[M]
    run_pair(data, B, rho, cap=400, K=5, acts=acts, na=3, wrap=False, check_every=3)


@pytest.mark.parametrize("M", [2, 3, 8])
def test_eviction_wraparound(M, split_always):
    rng = np.random.default_rng(100 + M)
    data = rng.random((500, M)) * np.linspace(1, 4, M)
    rho = {2: 0.35, 3: 0.5, 8: 1.4}[M]
    # mixed batch sizes, capacity not a multiple of them, sigma every 13 samples
    run_pair(data, [1, 7, 3, 64], rho, cap=97, K=13, wrap=True, check_every=2)


@pytest.mark.parametrize("M", [1, 3])
def test_tiny_capacity_evicts_from_the_tail(M, split_always):
    rng = np.random.default_rng(200 + M)
    data = rng.random((300, M))
    acts = rng.integers(0, 2, 300)
    run_pair(data, [1, 1, 3, 1, 2], 0.4, cap=10, K=4, acts=acts, na=2, wrap=True, tail_max=64,
             check_every=1)


def test_eviction_with_actions_and_dense_neighbourhoods(split_always):
    rng = np.random.default_rng(7)
    # random walk: clustered, many neighbours per insert
    data = np.cumsum(rng.normal(scale=0.05, size=(600, 2)), axis=0)
    acts = rng.integers(0, 2, 600)
    run_pair(data, [5, 1, 64], 0.3, cap=150, K=10, acts=acts, na=2, wrap=True, check_every=4)


def test_sigma_every_larger_than_batches():
    rng = np.random.default_rng(3)
    data = rng.random((500, 3)) * np.array([1.0, 10.0, 0.1])
    run_pair(data, 7, 0.3, cap=500, K=50, wrap=False, check_every=5)


def test_large_batches_self_join_and_dense_interior():
    rng = np.random.default_rng(11)
    data = rng.random((1200, 2))
    # B > 256 uses the sorted self-join; dense interior increments use the difference array
    pc, ref = run_pair(data, [300, 500, 9, 391], 0.35, cap=1200, K=100, wrap=False,
                       tail_max=64, check_every=1)
    assert pc.merges > 0


def test_large_batch_eviction_mixed_actions():
    rng = np.random.default_rng(12)
    data = rng.random((1500, 3))
    acts = rng.integers(0, 4, 1500)
    run_pair(data, [400, 3, 500], 0.6, cap=700, K=300, acts=acts, na=4, wrap=True,
             tail_max=32, check_every=1)


@pytest.mark.parametrize("M,bits", [(1, 6), (2, 10), (3, 9), (4, 13), (8, 13)])
def test_key_aliasing_and_fine_range_wraparound(monkeypatch, M, bits, split_always):
    # tiny keys: cells alias and the fine range wraps around; results must not change
    monkeypatch.setattr(pc_module._Grid, "key_bits", bits)
    rng = np.random.default_rng(30 + M)
    data = np.cumsum(rng.normal(size=(500, M)), axis=0)
    acts = rng.integers(0, 2, 500)
    run_pair(data, [1, 64, 7], {1: 0.02, 2: 0.05, 3: 0.1, 4: 0.2, 8: 0.5}[M], cap=300, K=9, acts=acts,
             na=2, wrap=True, tail_max=16, check_every=3)


def test_rho_zero_counts_exact_duplicates_far_from_origin():
    rng = np.random.default_rng(6)
    # integer tiles: with rho = 0 the pseudocount is the exact visit count of (tile, action)
    data = rng.integers(0, 4, (300, 2)).astype(np.float64) + 1e6
    acts = rng.integers(0, 2, 300)
    pc, ref = run_pair(data, [1, 7, 64], 0.0, cap=120, K=10, acts=acts, na=2, wrap=True,
                       tail_max=32, check_every=3)
    stored = {}
    for s_, (x, a, n) in ref.store.items():
        stored.setdefault((x, a), []).append(s_)
    for slots in stored.values():
        assert (pc.counts(torch.tensor(slots)) == len(slots)).all()


def test_repeated_positions_within_a_batch():
    rng = np.random.default_rng(5)
    data = rng.random((120, 2))
    pc = RadiusPseudocount(2, 0.5, 10, sigma_every=3, tail_max=4)
    ref = BruteForceCount(2, 0.5, 10, K=3)
    for t in range(0, 120, 12):
        idx = rng.integers(0, 10, 12)
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[t:t + 12]))
        ref.insert(idx, data[t:t + 12])
        np.testing.assert_array_equal(all_counts(pc, 10), ref.counts())


# --------------------------------------------------------------------------- ties at rho
def _exact_sigma_one_prefix():
    # four points with mean 0 and population std exactly 1 in both features
    return np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]], np.float32)


@pytest.mark.parametrize("tail_max", [4, 4096])
@pytest.mark.parametrize("B", [1, 5])
def test_ties_exactly_at_rho(tail_max, B, split_always):
    rho = 0.625  # 5/8: (3/8, 4/8) is at distance exactly rho, all values exact in float32
    pts = [[0.0, 0.0], [0.375, 0.5], [0.625, 0.0], [0.0, -0.625], [-0.375, -0.5],
           [0.625 + 2 ** -20, 0.0], [0.0, 0.625 + 2 ** -20], [0.75, 0.5], [0.375, 1.0],
           [0.0, 0.0], [-0.625, 0.0], [1.0, 0.5], [0.25, -0.125]]
    data = np.concatenate([_exact_sigma_one_prefix(), np.array(pts, np.float32)])
    # K huge: sigma is computed once, over the first batch (the +-1 prefix): exactly 1, 1
    pc = RadiusPseudocount(2, rho, 64, sigma_every=10 ** 9, tail_max=tail_max)
    ref = BruteForceCount(2, rho, 64, K=10 ** 9)
    pc.insert(torch.arange(4), torch.from_numpy(data[:4]))
    ref.insert(range(4), data[:4])
    assert pc.scale().tolist() == [1.0, 1.0]
    for t in range(4, len(data), B):
        idx = np.arange(t, min(t + B, len(data)))
        pc.insert(torch.from_numpy(idx), torch.from_numpy(data[idx]))
        ref.insert(idx, data[idx])
    got = all_counts(pc, 64)
    np.testing.assert_array_equal(got, ref.counts())
    # hand-checked: the origin sees (3/8,1/2), (5/8,0), (0,-5/8), (-3/8,-1/2), the second origin,
    # (-5/8,0), (1/4,-1/8) and itself; not the points 2^-20 beyond rho
    assert got[4] == 8

def test_tie_hand_counts():
    rho = 0.625
    data = np.concatenate([_exact_sigma_one_prefix(),
                           np.array([[0, 0], [0.375, 0.5], [0.625 + 2 ** -20, 0]], np.float32)])
    pc = RadiusPseudocount(2, rho, 16, sigma_every=10 ** 9, tail_max=2)
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
    pc = RadiusPseudocount(2, 0.3, 100, sigma_every=7, device="cuda", tail_max=16)
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
             wrap=True, tail_max=128, check_every=25)
