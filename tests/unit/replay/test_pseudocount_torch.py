"""TorchRadiusPseudocount against the native RadiusPseudocount and a plain reference (SPEC §4),
and the backend choice of ``make_radius_pseudocount``."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

from sun_lightning import native
from sun_lightning.replay import pseudocount as pc_module
from sun_lightning.replay import pseudocount_native, pseudocount_torch
from sun_lightning.replay.pseudocount import RadiusPseudocount, make_radius_pseudocount
from sun_lightning.replay.pseudocount_torch import TorchRadiusPseudocount

try:
    native.compiler("test")
    HAS_CC = True
except native.NativeError:
    HAS_CC = False
needs_cc = pytest.mark.skipif(not HAS_CC, reason="needs a C compiler (native index)")


# --------------------------------------------------------------------------- helpers
def assert_same(a, b, cap, msg=""):
    """Identical counts at every position, size and scale."""
    ca, cb = a.counts(torch.arange(cap)), b.counts(torch.arange(cap))
    assert ca.dtype == cb.dtype == torch.int64
    np.testing.assert_array_equal(cb.cpu().numpy(), ca.cpu().numpy(), err_msg=msg)
    assert len(a) == len(b), msg
    assert torch.equal(a.scale().cpu(), b.scale().cpu()), msg


def run_both(data, batch, rho, cap, K, acts=None, na=0, positions=None, device="cpu",
             single=False):
    """Feed ``data`` to both implementations (FIFO positions that wrap, or ``positions(t, B)``)
    and compare them after every call; ``single``: one-sample calls with x of shape [M]."""
    M = data.shape[1]
    nat = RadiusPseudocount(M, rho, cap, num_actions=na, sigma_every=K)
    tor = TorchRadiusPseudocount(M, rho, cap, num_actions=na, sigma_every=K, device=device)
    sizes = batch if isinstance(batch, (list, tuple)) else [batch]
    t = k = 0
    while t < len(data):
        B = min(sizes[k % len(sizes)], len(data) - t)
        k += 1
        idx = positions(t, B) if positions is not None else np.arange(t, t + B) % cap
        x = torch.from_numpy(data[t:t + B])
        a = None if acts is None else torch.from_numpy(acts[t:t + B])
        if single:
            assert B == 1
            nat.insert(torch.tensor(int(idx[0])), x[0], None if a is None else a[0])
            tor.insert(torch.tensor(int(idx[0]), device=device), x[0].to(device),
                       None if a is None else a[0].to(device))
        else:
            nat.insert(torch.from_numpy(idx), x, a)
            tor.insert(torch.from_numpy(idx).to(device), x.to(device),
                       None if a is None else a.to(device))
        t += B
        assert_same(nat, tor, cap, f"after {t} samples")
    return nat, tor


# --------------------------------------------------------------------------- against native
@pytest.mark.parametrize("K", [1, 7])
@pytest.mark.parametrize("B", [1, 4, 64])
@pytest.mark.parametrize("na", [0, 3])
@pytest.mark.parametrize("M", [1, 2, 4, 8])
@needs_cc
def test_random_wrapping_buffer(M, na, B, K):
    rng = np.random.default_rng(1000 * M + 100 * na + 10 * B + K)
    n = 260 if B > 1 else 150
    data = (rng.normal(size=(n, M)) * np.linspace(1.0, 3.0, M)).astype(np.float32)
    acts = rng.integers(0, na, n) if na else None
    rho = {1: 0.1, 2: 0.4, 4: 0.8, 8: 1.5}[M]
    # capacity not a multiple of B: the FIFO wraps mid-batch and evicts all the time
    run_both(data, B, rho, cap=61, K=K, acts=acts, na=na)


@pytest.mark.parametrize("M", [1, 3])
@needs_cc
def test_single_sample_calls_with_vector_x(M):
    rng = np.random.default_rng(40 + M)
    data = rng.random((120, M))
    acts = rng.integers(0, 2, 120)
    run_both(data, 1, 0.3, cap=50, K=7, acts=acts, na=2, single=True)


@needs_cc
def test_mixed_batches_random_positions():
    rng = np.random.default_rng(5)
    data = rng.random((600, 2)) * np.array([1.0, 2.0])
    acts = rng.integers(0, 2, 600)

    def positions(t, B):  # distinct random positions: evictions anywhere in the buffer
        return rng.choice(90, size=B, replace=False)

    run_both(data, [1, 9, 1, 30, 64], 0.5, cap=90, K=11, acts=acts, na=2, positions=positions)


@pytest.mark.parametrize("na", [0, 2])
@needs_cc
def test_repeated_positions_inside_one_batch(na):
    rng = np.random.default_rng(6 + na)
    data = rng.random((240, 3))
    acts = rng.integers(0, 2, 240) if na else None
    run_both(data, 12, 0.5, cap=10, K=3, acts=acts, na=na,
             positions=lambda t, B: rng.integers(0, 10, B))


@pytest.mark.parametrize("B", [1, 5, 64])
@pytest.mark.parametrize("first", ["prefix", "lattice"])
@needs_cc
def test_ties_exactly_at_rho_on_integer_grid(B, first):
    rng = np.random.default_rng(B)
    g = np.arange(-4, 5, dtype=np.float64)
    lattice = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    lattice = np.concatenate([lattice, lattice])[rng.permutation(2 * len(lattice))]
    if first == "prefix":
        # sigma computed once, over a first batch with population std exactly 1: st = 1, and
        # rho = 1 puts the 4 lattice neighbours (and the duplicates) exactly on the sphere
        prefix = np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]], np.float64)
        data = np.concatenate([prefix, lattice])
        batch = [4] + [B]
        nat, tor = run_both(data, batch, 1.0, cap=200, K=10 ** 9)
        assert nat.scale().tolist() == [1.0, 1.0]
    else:  # st recomputed over the lattice as it fills: the same formula decides either way
        run_both(lattice, B, 1.0, cap=120, K=5)


def scaled_lattice_with_ties(scale):
    """A first batch with population std exactly ``scale`` (st = scale while sigma is not
    recomputed), then a lattice at spacing scale / 8: with rho = 5/8, pairs offset by (5, 0) or
    (3, 4) steps are exactly at rho, and for scale = 105 the multiplication by 1 / st (which
    CUDA's division by a CPU scalar would use) rounds them beyond rho."""
    prefix = np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]], np.float64) * scale
    g = np.arange(-6, 7) * (scale / 8)
    return np.concatenate([prefix, np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)])


@pytest.mark.parametrize("B", [1, 4, 64])
@pytest.mark.parametrize("scale", [1.0, 105.0])
@needs_cc
def test_ties_exactly_at_rho_scaled(scale, B):
    data = scaled_lattice_with_ties(scale)
    nat, tor = run_both(data, [4, B], 0.625, cap=200, K=10 ** 9)
    assert tor.scale().tolist() == [scale, scale]
    # the lattice centre sees every lattice point (i, j) with i^2 + j^2 <= 25, the 12 at exactly
    # rho included (81 in all, itself too)
    centre = 4 + 6 * 13 + 6
    assert tor.counts(torch.tensor([centre])).item() == 81


@needs_cc
def test_rho_zero_counts_duplicates():
    rng = np.random.default_rng(8)
    data = rng.integers(0, 3, (200, 2)).astype(np.float64) + 1e6
    acts = rng.integers(0, 2, 200)
    run_both(data, [1, 7, 64], 0.0, cap=70, K=10, acts=acts, na=2)


@needs_cc
def test_constant_features_and_median_floor():
    rng = np.random.default_rng(9)
    data = np.zeros((200, 3))
    data[:, 0] = rng.random(200)
    data[:, 1] = 0.1  # constant, floored by the median
    data[:, 2] = rng.random(200) * 4.0
    nat, tor = run_both(data, [1, 9, 4], 0.3, cap=80, K=1)
    st = tor.scale()
    assert st[1] == st[0]
    data[:, 2] = -1.0  # two constant features: median 0, scale 1 for both
    nat, tor = run_both(data, [1, 9], 0.05, cap=80, K=7)
    assert tor.scale()[1:].tolist() == [1.0, 1.0]


@needs_cc
def test_drifting_data_recenters_moments(monkeypatch):
    rng = np.random.default_rng(10)
    # a random walk far from its first sample: the running moments are re-centred, which reads
    # the stored coordinates back (survivors in position order, then the batch)
    data = np.cumsum(rng.normal(size=(700, 2)), axis=0) + 1e3
    calls = []
    orig = pseudocount_torch.RunningMoments._recenter

    def spy(self, X):
        calls.append(len(X))
        return orig(self, X)

    monkeypatch.setattr(pseudocount_torch.RunningMoments, "_recenter", spy)
    acts = rng.integers(0, 2, 700)
    run_both(data, [64, 1, 7], 0.4, cap=150, K=20, acts=acts, na=2)
    assert calls


@needs_cc
def test_small_blocks(monkeypatch):
    # tiny blocks: many row and column blocks per insert, partial last blocks
    monkeypatch.setattr(pseudocount_torch, "_BLOCK_CPU", 48)
    monkeypatch.setattr(pseudocount_torch, "_BLOCK_ACCEL", 48)
    monkeypatch.setattr(pseudocount_torch, "_COLS", 5)
    rng = np.random.default_rng(11)
    data = rng.random((400, 4))
    acts = rng.integers(0, 2, 400)
    run_both(data, [1, 13, 64, 3], 0.7, cap=170, K=9, acts=acts, na=2)


@needs_cc
def test_pickle_and_deepcopy_continue_identically():
    rng = np.random.default_rng(12)
    data = rng.random((300, 3))
    acts = rng.integers(0, 2, 300)
    nat = RadiusPseudocount(3, 0.4, 100, num_actions=2, sigma_every=9)
    tor = TorchRadiusPseudocount(3, 0.4, 100, num_actions=2, sigma_every=9)
    for p in (nat, tor):
        for t in range(0, 150, 5):
            p.insert(torch.arange(t, t + 5) % 100, torch.from_numpy(data[t:t + 5]),
                     torch.from_numpy(acts[t:t + 5]))
    copies = [copy.deepcopy(tor), pickle.loads(pickle.dumps(tor))]
    for p in [nat, tor] + copies:
        for t in range(150, 300, 3):
            p.insert(torch.arange(t, t + 3) % 100, torch.from_numpy(data[t:t + 3]),
                     torch.from_numpy(acts[t:t + 3]))
    for p in [tor] + copies:
        assert_same(nat, p, 100)


# --------------------------------------------------------------------------- plain reference
def reference_counts(data, idx_batches, rho, cap, K):
    """Slow loop over the documented semantics (pseudocount.py's module docstring)."""
    store, seen, st = {}, 0, np.ones(data.shape[1])
    t = 0
    for idx in idx_batches:
        xs = [data[t + i] for i in range(len(idx))]
        t += len(idx)
        evicted = [store.pop(s) for s in idx if s in store]
        if any((seen + i) % K == 0 for i in range(len(idx))):
            X = np.array([e[0] for e in store.values()] + xs)
            sig = np.array([0.0 if X[:, m].min() == X[:, m].max() else X[:, m].std()
                            for m in range(X.shape[1])])
            st = np.maximum(sig, np.median(sig))
            st[st == 0] = 1.0
        seen += len(idx)

        def near(x, y):
            d2 = 0.0
            for m in range(len(x)):
                d2 += ((x[m] - y[m]) / st[m]) ** 2
            return d2 <= rho ** 2

        for ex, _ in evicted:
            for e in store.values():
                e[1] -= near(ex, e[0])
        new = []
        for i, x in enumerate(xs):
            n = 1 + sum(near(x, xs[j]) for j in range(len(xs)) if j != i)
            for e in store.values():
                if near(x, e[0]):
                    n += 1
                    e[1] += 1
            new.append(n)
        for s, x, n in zip(idx, xs, new):
            store[s] = [x, n]
    out = np.zeros(cap, np.int64)
    for s, (_, n) in store.items():
        out[s] = n
    return out


@pytest.mark.parametrize("M", [1, 3])
def test_against_plain_reference(M):
    rng = np.random.default_rng(20 + M)
    data = rng.random((150, M)) * np.linspace(1.0, 2.0, M)
    sizes, batches, t = [1, 4, 9, 1, 16], [], 0
    while t < len(data):
        B = min(sizes[len(batches) % len(sizes)], len(data) - t)
        batches.append([int(s) for s in np.arange(t, t + B) % 40])
        t += B
    tor = TorchRadiusPseudocount(M, 0.3, 40, sigma_every=6)
    for k, idx in enumerate(batches):
        t0 = sum(len(b) for b in batches[:k])
        tor.insert(torch.tensor(idx), torch.from_numpy(data[t0:t0 + len(idx)]))
    np.testing.assert_array_equal(tor.counts(torch.arange(40)).numpy(),
                                  reference_counts(data, batches, 0.3, 40, 6))


# --------------------------------------------------------------------------- api
def test_api_shapes_dtypes_and_errors():
    pc = TorchRadiusPseudocount(2, 0.1, 8, num_actions=2, sigma_every=2)
    assert len(pc) == 0 and pc.device == torch.device("cpu")
    assert pc.scale().tolist() == [1.0, 1.0] and pc.scale().dtype == torch.float32
    pc.insert(torch.tensor([0, 1, 2]), torch.tensor([[0.0, 0.0], [1.0, 2.0], [0.0, 0.01]]),
              torch.tensor([1, 1, 0]))
    assert len(pc) == 3
    c = pc.counts(torch.tensor([0, 2, 5, -8]))
    assert c.dtype == torch.int64 and c.tolist() == [1, 1, 0, 1]
    assert pc.counts(torch.tensor([[0, 1]])).shape == (1, 2)
    assert pc.counts(np.array([0, 1])).tolist() == [1, 1]
    x = torch.tensor([[1.0, 4.0]], dtype=torch.float64)
    s = pc.standardize(x)
    assert s.dtype == torch.float64
    torch.testing.assert_close(s, x / pc.scale().double())
    with pytest.raises(ValueError):
        pc.insert(torch.tensor([3]), torch.zeros(1, 2))  # missing action
    with pytest.raises(ValueError):
        pc.insert(torch.tensor([3]), torch.zeros(1, 2), torch.tensor([2]))  # action range
    with pytest.raises(IndexError):
        pc.insert(torch.tensor([8]), torch.zeros(1, 2), torch.tensor([0]))
    with pytest.raises(IndexError):
        pc.counts(torch.tensor([8]))
    with pytest.raises(ValueError):
        pc.insert(torch.tensor([3]), torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    assert len(pc) == 3
    pc2 = TorchRadiusPseudocount(2, 0.1, 8)
    with pytest.raises(ValueError):
        pc2.insert(torch.tensor([0]), torch.zeros(1, 2), torch.tensor([0]))
    pc2.insert(np.array([1]), np.array([[0.0, 0.0]]))
    pc2.insert(torch.tensor([2]), torch.tensor([[0.0, 0.0]], dtype=torch.float16))
    pc2.insert(torch.tensor([[3], [4]]), torch.zeros(2, 2, dtype=torch.float64))
    pc2.insert(torch.tensor([], dtype=torch.int64), torch.zeros(0, 2))
    assert pc2.counts(torch.tensor([1, 2, 3, 4])).tolist() == [4, 4, 4, 4]
    for bad in (dict(goal_dim=0), dict(rho=-1.0), dict(capacity=0), dict(sigma_every=0),
                dict(num_actions=-1)):
        with pytest.raises(ValueError):
            TorchRadiusPseudocount(**{**dict(goal_dim=2, rho=0.1, capacity=8), **bad})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@needs_cc
def test_cuda_matches_native():
    rng = np.random.default_rng(30)
    data = rng.normal(size=(500, 4)).astype(np.float32) * np.array([1, 105, 0.5, 3], np.float32)
    acts = rng.integers(0, 3, 500)
    nat, tor = run_both(data, [1, 4, 64, 7], 0.8, cap=150, K=7, acts=acts, na=3, device="cuda")
    assert tor.counts(torch.arange(150, device="cuda")).device.type == "cuda"
    assert tor.scale().device.type == "cuda"
    assert tor.standardize(torch.ones(3, 4, device="cuda")).device.type == "cuda"
    # ties at exactly rho: a true division on the device, not a multiplication by 1 / st
    run_both(scaled_lattice_with_ties(105.0), [4, 5], 0.625, cap=200, K=10 ** 9, device="cuda")
    moved = pickle.loads(pickle.dumps(tor))
    assert_same(nat, moved, 150)


# --------------------------------------------------------------------------- backend choice
def test_backend_torch_and_unknown():
    pc = make_radius_pseudocount(2, 0.1, 16, backend="torch", sigma_every=5)
    assert type(pc) is TorchRadiusPseudocount and pc.sigma_every == 5
    with pytest.raises(ValueError, match="'gpu'.*'auto'.*'native'.*'torch'"):
        make_radius_pseudocount(2, 0.1, 16, backend="gpu")


@needs_cc
def test_backend_auto_and_native_on_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pc = make_radius_pseudocount(2, 0.1, 16, num_actions=3, backend="auto")
    assert type(pc) is RadiusPseudocount and pc.num_actions == 3
    assert type(make_radius_pseudocount(2, 0.1, 16, backend="native")) is RadiusPseudocount


def test_backend_auto_accelerator_picks_torch_silently(monkeypatch):
    def boom(*args):
        raise AssertionError("the native library must not be consulted off the CPU")

    monkeypatch.setattr(pseudocount_native.LIBRARY, "available", boom)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pc = make_radius_pseudocount(2, 0.1, 16, device="meta")  # any non-CPU device
    assert type(pc) is TorchRadiusPseudocount and pc.device.type == "meta"


def test_backend_auto_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(pseudocount_native.LIBRARY, "available", lambda *args: False)
    with pytest.warns(UserWarning) as rec:
        pc = make_radius_pseudocount(2, 0.1, 16)
    assert type(pc) is TorchRadiusPseudocount
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "torch" in msg and "\n" not in msg


def test_backend_without_compiler(tmp_path, monkeypatch):
    # the real path: no compiler on PATH, the library not loaded yet in this process
    monkeypatch.setattr(pseudocount_native.LIBRARY, "_lib", None)
    monkeypatch.setattr(pseudocount_native.LIBRARY, "_available", None)
    monkeypatch.setattr(pc_module, "_native_why", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.warns(UserWarning) as rec:
        pc = make_radius_pseudocount(2, 0.1, 16, backend="auto")
    assert type(pc) is TorchRadiusPseudocount
    assert len(rec) == 1  # LIBRARY.available's own warning is folded into this one
    msg = str(rec[0].message)
    assert "torch" in msg and "C compiler" in msg and "\n" not in msg
    with pytest.warns(UserWarning, match="C compiler") as rec:  # later calls say why too
        make_radius_pseudocount(2, 0.1, 16)
    assert len(rec) == 1
    with pytest.raises(native.NativeError):
        make_radius_pseudocount(2, 0.1, 16, backend="native")
