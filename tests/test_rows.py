"""The C row kernels of Q (``networks/rows.py``) against the PyTorch row path, values and gradients."""

from __future__ import annotations

import contextlib

import pytest
import torch

from sun_lightning import native
from sun_lightning.networks import rows
from sun_lightning.networks.q_network import GoalQNetwork


def pair(width: int, pieces: int, seed: int = 0) -> tuple[GoalQNetwork, GoalQNetwork]:
    torch.manual_seed(seed)
    fast = GoalQNetwork(6, 5, 3, width=width, maxout_pieces=pieces, init_std=0.3)
    slow = GoalQNetwork(6, 5, 3, width=width, maxout_pieces=pieces, init_std=0.3, native_rows=False)
    slow.load_state_dict(fast.state_dict())
    return fast, slow


def grads(net: GoalQNetwork, weight: torch.Tensor, *args, **kwargs) -> dict[str, torch.Tensor]:
    net.zero_grad()
    with single_threaded_reference(net):
        (net(*args, **kwargs) * weight).sum().backward()
    return {name: p.grad.clone() for name, p in net.named_parameters()}


@contextlib.contextmanager
def single_threaded_reference(net: GoalQNetwork):
    """Run the PyTorch path (``net`` without the C kernels) on one thread, as the C path runs evaluations of fewer
    than 256 rows: MKL rounds one- and two-thread products differently, and a maxout's near-tie between two
    pieces can then go either way, which changes the gradient discontinuously (seen at width 64)."""
    threads = torch.get_num_threads()
    if not net.native_rows:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("width,pieces", [(64, 4), (13, 3), (8, 1)])
@pytest.mark.parametrize("indexed", ["both", "obs", "goal", "none"])
def test_native_rows_match_the_pytorch_rows(width, pieces, indexed):
    # width 13: the kernels' remainder loops (not a multiple of 8); 1 piece: the maxout is the identity
    fast, slow = pair(width, pieces)
    assert fast.uses_native_rows(torch.zeros(1, width), torch.zeros(1, width))
    rows_n = 50
    states, goals = torch.randn(12, 6), torch.randn(7, 5)
    i, j = torch.randint(12, (rows_n,)), torch.randint(7, (rows_n,))
    kwargs = {}
    if indexed in ("both", "obs"):
        kwargs["obs_index"] = i
    else:
        states = states[i]
    if indexed in ("both", "goal"):
        kwargs["goal_index"] = j
    else:
        goals = goals[j]
    with torch.no_grad():
        torch.testing.assert_close(fast(states, goals, **kwargs), slow(states, goals, **kwargs))
    weight = torch.randn(rows_n, 3, 3)
    g_fast, g_slow = grads(fast, weight, states, goals, **kwargs), grads(slow, weight, states, goals, **kwargs)
    for name in g_slow:
        torch.testing.assert_close(g_fast[name], g_slow[name], rtol=1e-4, atol=1e-5, msg=name)
    # the branches' dropout draws its own stream: the same torch seed gives the same values
    torch.manual_seed(3)
    a = fast(states, goals, dropout=True, **kwargs)
    torch.manual_seed(3)
    assert torch.equal(a, fast(states, goals, dropout=True, **kwargs))
    assert not torch.equal(a, fast(states, goals, **kwargs))


def test_native_rows_backward_through_inputs():
    # gradients reach the encoder inputs through the gathered tables (scatter-add of repeated rows)
    fast, slow = pair(16, 4)
    states, goals = torch.randn(5, 6), torch.randn(3, 5)
    i, j = torch.tensor([0, 0, 4, 2, 0, 1]), torch.tensor([2, 2, 2, 0, 1, 1])
    out = []
    for net in (fast, slow):
        s, g = states.clone().requires_grad_(), goals.clone().requires_grad_()
        net(s, g, obs_index=i, goal_index=j).square().sum().backward()
        out.append((s.grad, g.grad))
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-6)


def test_native_rows_are_deterministic():
    fast, _ = pair(64, 4)
    states, goals = torch.randn(40, 6), torch.randn(9, 5)
    i, j = torch.randint(40, (300,)), torch.randint(9, (300,))
    weight = torch.randn(300, 3, 3)
    first, second = grads(fast, weight, states, goals, obs_index=i, goal_index=j), grads(
        fast, weight, states, goals, obs_index=i, goal_index=j)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_out_of_range_row_index_is_an_error():
    fast, _ = pair(8, 2)
    with pytest.raises(IndexError, match="row index out of range: tables of 4 states and 3 goals"):
        fast(torch.randn(4, 6), torch.randn(3, 5), obs_index=torch.tensor([0, 4]), goal_index=torch.tensor([0, 1]))
    with pytest.raises(IndexError, match="out of range"):
        fast(torch.randn(4, 6), torch.randn(3, 5), obs_index=torch.tensor([0, 1]), goal_index=torch.tensor([-1, 1]))


def test_mismatched_rows_are_an_error():
    fast, _ = pair(8, 2)
    with pytest.raises(ValueError, match="rows disagree"):
        fast(torch.randn(4, 6), torch.randn(3, 5))
    with pytest.raises(ValueError, match="goal_action has 3 entries for 4 rows"):
        fast(torch.randn(4, 6), torch.randn(4, 5), goal_action=torch.tensor([0, 1, 2]))


def test_without_a_compiler_the_pytorch_path_runs_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(rows.LIBRARY, "_lib", None)
    monkeypatch.setattr(rows.LIBRARY, "_available", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("SUN_LIGHTNING_CACHE_DIR", str(tmp_path))  # nothing cached there either
    fast, slow = pair(8, 2)
    states, goals = torch.randn(4, 6), torch.randn(4, 5)
    with pytest.warns(UserWarning, match="(?s)row-kernel library.*C compiler.*PyTorch row path"):
        out = fast(states, goals)
    torch.testing.assert_close(out, slow(states, goals))
    with pytest.raises(native.NativeError):
        rows.LIBRARY.load()


def test_batched_inputs_take_the_pytorch_path():
    fast, slow = pair(8, 2)
    states, goals = torch.randn(2, 4, 6), torch.randn(2, 4, 5)  # leading batch dims: not the row kernels' layout
    assert not fast.uses_native_rows(torch.zeros(2, 4, 8), torch.zeros(2, 4, 8))
    torch.testing.assert_close(fast(states, goals), slow(states, goals))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_branch_kernel_is_silu_of_dropout_of_layernorm(p):
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(13, bias=False)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
    h = (torch.randn(40, 13) * 3).requires_grad_()
    seed = 123456789012345
    out = rows.branch_forward(h, ln, p, seed)
    weight = torch.randn(40, 13)
    (out * weight).sum().backward()
    got = (h.grad.clone(), ln.weight.grad.clone())
    h.grad, ln.weight.grad = None, None
    mask = rows.branch_dropout_mask((40, 13), p, seed) if p else torch.ones(40, 13)
    ref = torch.nn.functional.silu(ln(h) * mask)
    (ref * weight).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, (h.grad, ln.weight.grad), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(rows.branch_forward(h, ln, p, seed), out)


def test_branch_dropout_mask_rate_scale_and_seeds():
    mask = rows.branch_dropout_mask((2000, 100), 0.1, 7)
    assert abs((mask == 0).float().mean().item() - 0.1) < 0.003
    assert torch.allclose(mask[mask > 0], torch.tensor(1 / 0.9))
    other = rows.branch_dropout_mask((2000, 100), 0.1, 8)
    assert torch.equal(mask, rows.branch_dropout_mask((2000, 100), 0.1, 7))
    agree = ((mask == 0) == (other == 0)).float().mean().item()
    assert abs(agree - (0.9**2 + 0.1**2)) < 0.003  # independent streams across seeds


def test_goal_action_columns_match_the_pytorch_path():
    # Q(s, ·, g_s, g_a) at each row's goal action: values, and gradients that reach only those columns
    fast, slow = pair(16, 4)
    states, goals = torch.randn(12, 6), torch.randn(7, 5)
    i, j, ga = torch.randint(12, (40,)), torch.randint(7, (40,)), torch.randint(3, (40,))
    kwargs = dict(obs_index=i, goal_index=j, goal_action=ga)
    full = fast(states, goals, obs_index=i, goal_index=j)
    torch.testing.assert_close(fast(states, goals, **kwargs), full[torch.arange(40), :, ga])
    torch.testing.assert_close(fast(states, goals, **kwargs), slow(states, goals, **kwargs))
    weight = torch.randn(40, 3)
    g_fast, g_slow = grads(fast, weight, states, goals, **kwargs), grads(slow, weight, states, goals, **kwargs)
    for name in g_slow:
        torch.testing.assert_close(g_fast[name], g_slow[name], rtol=1e-4, atol=1e-5, msg=name)


def test_results_do_not_depend_on_the_thread_count():
    # The kernels run on torch's OpenMP threads; their sums over rows (the LayerNorm weights' gradients)
    # go per fixed chunk of rows, added in chunk order. (The matrix products' own reductions are MKL's.)
    fast, _ = pair(64, 4)
    states, goals = torch.randn(600, 6), torch.randn(300, 5)
    i, j = torch.randint(600, (2000,)), torch.randint(300, (2000,))
    weight = torch.randn(2000, 3, 3)
    norms = ["state_branch.norm.weight", "goal_branch.norm.weight", "head.0.weight", "head.3.weight"]
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            torch.manual_seed(5)
            with torch.no_grad():
                values = fast(states, goals, dropout=True, obs_index=i, goal_index=j)
            torch.manual_seed(5)
            g = grads(fast, weight, states, goals, dropout=True, obs_index=i, goal_index=j)
            out.append([values] + [g[name] for name in norms])
    finally:
        torch.set_num_threads(threads)
    for other in out[1:]:
        assert all(torch.equal(a, b) for a, b in zip(out[0], other))


def test_small_evaluations_run_on_one_thread_whatever_the_thread_count():
    # fewer than 256 rows (acting, goal selection): the whole call on the calling thread, bit-identical results
    fast, _ = pair(64, 4)
    states, goals = torch.randn(12, 6), torch.randn(7, 5)
    i, j = torch.randint(12, (50,)), torch.randint(7, (50,))
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            with torch.no_grad():
                out.append(fast(states, goals, obs_index=i, goal_index=j))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(out[0], other) for other in out[1:])


def test_checked_weights_follow_replaced_weights():
    # the check is remembered per weights' (address, shape, dtype): a replaced weight is checked afresh
    fast, slow = pair(64, 4)
    states, goals = torch.randn(5, 6), torch.randn(5, 5)
    with torch.no_grad():
        torch.testing.assert_close(fast(states, goals), slow(states, goals))
        new = torch.randn(64, 64) * 0.3
        fast.head[2].weight.data = new.clone()  # same shape, new storage
        slow.head[2].weight.data = new.clone()
        torch.testing.assert_close(fast(states, goals), slow(states, goals))
        fast.head[2].weight.data = fast.head[2].weight.data.t()  # same address and shape, transposed
        with pytest.raises(ValueError, match="contiguous float32"):
            fast(states, goals)
        fast.head[2].weight.data = torch.randn(64, 63)
        with pytest.raises(ValueError, match="do not fit tables"):
            fast(states, goals)


def test_matrix_products_are_counted_and_their_shapes_recorded():
    fast, _ = pair(64, 4)
    obs, goal = torch.randn(7, 6), torch.randn(5, 5)
    oi, gi = torch.randint(7, (30,)), torch.randint(5, (30,))
    rows.gemm_time(reset=True)
    rows.gemm_shapes(record=True)
    out = fast(obs.requires_grad_(), goal, obs_index=oi, goal_index=gi)
    forward = rows.gemm_shapes(record=True)
    out.sum().backward()
    shapes = rows.gemm_shapes(record=False)
    seconds, calls = rows.gemm_time(reset=True)
    # forward: two branches, the tables' and the rows' maxout maps, the head's two linears
    assert forward == [(False, True, 7, 64, 6), (False, True, 5, 64, 5), (False, True, 7, 256, 64),
                       (False, True, 5, 256, 64), (False, True, 30, 256, 64), (False, True, 30, 64, 64),
                       (False, True, 30, 9, 64)]
    # backward: two products per linear map, plus the state inputs' gradient (obs requires grad)
    assert len(shapes) == calls == 7 + 13 and seconds > 0
    assert (True, False, 256, 64, 30) in shapes and (False, False, 7, 6, 64) in shapes
    assert rows.gemm_time() == (0.0, 0)


def test_weights_that_do_not_fit_the_tables_are_an_error():
    fast, _ = pair(64, 4)
    params = fast.native_params()._replace(w2=torch.zeros(64, 63))
    with pytest.raises(ValueError, match="do not fit tables of 6 and 5 features"):
        rows.q_forward(torch.randn(3, 6), torch.randn(3, 5), params, fast.native_config(False))
