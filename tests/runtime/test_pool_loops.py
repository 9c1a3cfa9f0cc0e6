"""Eager max pooling and the row scatters of its backward run as numba loops on large float arrays
(`fxkit.runtime.ops.pool_loops`): bit for bit what numpy's forms give, over geometries, dtypes, NaN, ties
and signed zeros, and PyTorch's values and indices where it is installed."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fxkit
from fxkit.runtime.ops import loop_gate, pool_loops


@pytest.fixture
def loops(monkeypatch):
    """Run the loops on any size (``True``) or never (``False``); counts the loop calls."""
    calls = {"pool": 0, "scatter": 0, "scatter_add": 0}

    def counted(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)
        return wrapper

    monkeypatch.setattr(pool_loops, "max_pool2d_planes", counted("pool", pool_loops.max_pool2d_planes))
    monkeypatch.setattr(pool_loops, "scatter_rows", counted("scatter", pool_loops.scatter_rows))
    monkeypatch.setattr(pool_loops, "scatter_add_rows", counted("scatter_add", pool_loops.scatter_add_rows))

    def switch(on):
        monkeypatch.setattr(loop_gate, "LOOP_MIN", 1 if on else 2**62)
        return calls
    return switch


@st.composite
def pools(draw):
    """(input shape, kernel, stride, padding, dilation, ceil_mode) that PyTorch accepts."""
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    h, w = (draw(st.integers(max(1, s - 2 * p), 13)) for s, p in zip(spans, padding))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), h, w)
    return shape, kernel, stride, padding, dilation, draw(st.booleans())


def _values(rng, shape, dtype, kind):
    x = rng.standard_normal(shape)
    if kind == "ties":
        x = np.round(x)  # many equal values in a window: the first must win
    elif kind == "nan":
        x[rng.random(shape) < 0.15] = np.nan  # the last NaN in a window wins
    elif kind == "inf":
        x[rng.random(shape) < 0.3] = -np.inf  # windows of -inf keep their first real element
    return x.astype(dtype)


def _pool(x, geometry):
    kernel, stride, padding, dilation, ceil_mode = geometry
    return fxkit.nn.functional.max_pool2d(fxkit.from_numpy(x), kernel, stride, padding, dilation, ceil_mode,
                                          return_indices=True)


# NOTE: the fixture only patches module attributes, the same for every example; counts are compared as deltas.
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool=pools(), seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float32, np.float64]),
       kind=st.sampled_from(["normal", "ties", "nan", "inf"]))
def test_pool_loop_gives_the_taps_values_and_indices(loops, pool, seed, dtype, kind):
    shape, *geometry = pool
    x = _values(np.random.default_rng(seed), shape, dtype, kind)
    try:
        loops(False)
        expected = [t.numpy() for t in _pool(x, geometry)]
    except fxkit.FxkitError:
        return  # a geometry PyTorch refuses too (an output row starting in the padding)
    calls = loops(True)
    before = calls["pool"]
    got = [t.numpy() for t in _pool(x, geometry)]
    assert calls["pool"] == before + 1
    np.testing.assert_array_equal(got[0], expected[0])  # NaN compares equal to NaN here
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[0].dtype == dtype and got[1].dtype == np.int64


@pytest.mark.parametrize("geometry", [(2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 1, 1, 2, False),
                                      (2, 2, 0, 1, True), ((3, 2), (2, 1), (1, 0), 1, False)])
def test_pool_loop_matches_pytorch(loops, geometry):
    torch = pytest.importorskip("torch")
    x = _values(np.random.default_rng(0), (4, 8, 15, 12), np.float32, "ties")
    calls = loops(True)
    values, indices = _pool(x, geometry)
    expected, expected_indices = torch.nn.functional.max_pool2d(torch.from_numpy(x), *geometry, return_indices=True)
    assert calls["pool"] == 1
    np.testing.assert_array_equal(values.numpy(), expected.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())


def test_large_float_pools_run_the_loop_and_others_numpy(loops):
    calls = loops(False)
    monkey_min = loop_gate.LOOP_MIN
    assert monkey_min > 4096  # switched off: nothing runs the loop
    pool = fxkit.nn.functional.max_pool2d
    loop_gate.LOOP_MIN = 4096
    pool(fxkit.zeros(1, 1, 8, 8), 2, return_indices=True)  # 64 elements: numpy's taps, numba not needed
    pool(fxkit.zeros(8, 8, 8, 8, dtype=fxkit.float16), 2, return_indices=True)  # float16: numpy's taps
    pool(fxkit.zeros(8, 8, 8, 8).transpose(2, 3), 2, return_indices=True)  # not C-contiguous: numpy's taps
    pool(fxkit.zeros(8, 8, 40, 40), 2)  # long rows, no indices: numpy's maximum is faster
    assert calls["pool"] == 0
    pool(fxkit.zeros(8, 8, 8, 8), 2, return_indices=True)
    pool(fxkit.zeros(8, 8, 8, 8), 2)  # short rows: the loop even without indices
    assert calls["pool"] == 2


def _rows(rng, dtype, dense):
    rows, length = (6, 5), 40
    picks = 80 if dense else 4  # dense: 2400 picks into 1200 positions, summed as bincount would
    out = rng.standard_normal(rows + (length,)).astype(dtype)
    out[0] = -0.0  # positions no pick reaches: -0.0 + 0.0 is +0.0 in the summing form, as in bincount's
    index = rng.integers(0, length, rows + (picks,))
    src = (rng.standard_normal(rows + (picks,)) * 10.0 ** rng.uniform(-6, 6, rows + (picks,))).astype(dtype)
    src.reshape(-1)[::11] = np.nan
    return out, index, src


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dense", [True, False])
def test_scatter_loops_give_numpys_bits(loops, monkeypatch, dtype, dense):
    from fxkit.runtime.ops import indexing

    monkeypatch.setattr(indexing, "FLAT_INDEX_MIN", 1)  # small rows, as the large ones run
    out, index, src = _rows(np.random.default_rng(1), dtype, dense)
    a, i, s = (fxkit.from_numpy(v) for v in (out, index, src))
    loops(False)
    expected = [a.scatter(-1, i, s).numpy(), a.scatter_add(-1, i, s).numpy()]
    calls = loops(True)
    got = [a.scatter(-1, i, s).numpy(), a.scatter_add(-1, i, s).numpy()]
    assert calls["scatter"] == 1 and calls["scatter_add"] == 1
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.view(np.uint8), e.view(np.uint8))


def test_scatter_add_loop_sums_against_float64(loops, monkeypatch):
    from fxkit.runtime.ops import indexing

    monkeypatch.setattr(indexing, "FLAT_INDEX_MIN", 1)
    rng = np.random.default_rng(2)
    out = rng.standard_normal((3, 4, 50)).astype(np.float32)
    index = rng.integers(0, 50, (3, 4, 400))
    src = rng.standard_normal((3, 4, 400)).astype(np.float32)
    expected = out.astype(np.float64)
    np.add.at(expected, tuple(np.indices(index.shape)[:-1]) + (index,), src.astype(np.float64))
    calls = loops(True)
    got = fxkit.from_numpy(out).scatter_add(-1, fxkit.from_numpy(index), fxkit.from_numpy(src)).numpy()
    assert calls["scatter_add"] == 1
    np.testing.assert_array_equal(got, expected.astype(np.float32))  # float64 sums, rounded once


def test_pool_backward_through_the_loops_matches_pytorch(loops):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = _values(rng, (4, 8, 16, 16), np.float32, "ties")
    g = rng.standard_normal((4, 8, 8, 8)).astype(np.float32)
    calls = loops(True)
    for args in ((2, 2, 0), (3, 2, 1)):  # disjoint windows: written; overlapping: added in order, as PyTorch does
        t = fxkit.from_numpy(x).requires_grad_()
        fxkit.nn.functional.max_pool2d(t, *args).backward(fxkit.from_numpy(g))
        tt = torch.from_numpy(x).requires_grad_()
        torch.nn.functional.max_pool2d(tt, *args).backward(torch.from_numpy(g))
        np.testing.assert_array_equal(t.grad.numpy().view(np.uint32), tt.grad.numpy().view(np.uint32))
    assert calls["pool"] == 2 and calls["scatter"] == 2 and calls["scatter_add"] == 0
