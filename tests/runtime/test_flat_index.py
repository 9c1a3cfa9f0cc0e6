"""gather, scatter and scatter_add with many indices, which index through one flat position array
(`flat_along`) and, for scatter_add on floats, sum by ``bincount``: against numpy's own advanced
indexing over the open mesh of coordinates, and float64 sums of every pick."""
import math

import numpy as np
from hypothesis import given, settings, strategies as st

import fxkit
from fxkit.runtime.ops.indexing import FLAT_INDEX_MIN


@st.composite
def layouts(draw):
    """(input shape, index shape, dim) with index.size >= FLAT_INDEX_MIN: the index no larger than the
    input off ``dim``, any length along it."""
    ndim = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 24)) for _ in range(ndim)]
    dim = draw(st.integers(0, ndim - 1))
    index_shape = [draw(st.integers(1, n)) if i != dim else 1 for i, n in enumerate(shape)]
    rest = math.prod(index_shape)
    index_shape[dim] = -(-FLAT_INDEX_MIN // rest) + draw(st.integers(0, 64))
    return tuple(shape), tuple(index_shape), dim


def _mesh(index, dim):
    """numpy's own pairing of ``index`` along ``dim`` with every other coordinate."""
    return tuple(index if i == dim else np.arange(n).reshape((-1,) + (1,) * (index.ndim - 1 - i))
                 for i, n in enumerate(index.shape))


@settings(max_examples=40, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**32 - 1), negative_dim=st.booleans(), order=st.sampled_from("CF"))
def test_gather_and_scatter_pick_what_numpy_picks(layout, seed, negative_dim, order):
    shape, index_shape, dim = layout
    rng = np.random.default_rng(seed)
    a = np.asarray(rng.standard_normal(shape).astype(np.float32), order=order)  # F: gather keeps the mesh
    index = rng.integers(0, shape[dim], index_shape)
    d = dim - len(shape) if negative_dim else dim
    got = fxkit.gather(fxkit.from_numpy(a), d, fxkit.from_numpy(index)).numpy()
    np.testing.assert_array_equal(got, a[_mesh(index, dim)])
    # scatter: distinct positions along dim in each line (so no write lands over another), in an
    # input long enough along dim to hold every one
    long = shape[:dim] + (max(shape[dim], index_shape[dim]),) + shape[dim + 1:]
    b = rng.standard_normal(long).astype(np.float32)
    shuffled = np.argsort(rng.random(index_shape[:dim] + (long[dim],) + index_shape[dim + 1:]), axis=dim)
    unique = np.take(shuffled, np.arange(index_shape[dim]), axis=dim)
    src = rng.standard_normal(index_shape).astype(np.float32)
    expected = b.copy()
    expected[_mesh(unique, dim)] = src
    got = fxkit.from_numpy(b).scatter(d, fxkit.from_numpy(unique), fxkit.from_numpy(src)).numpy()
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float32, np.float64]))
def test_scatter_add_sums_every_pick(layout, seed, dtype):
    shape, index_shape, dim = layout
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dtype)
    index = rng.integers(0, shape[dim], index_shape)
    src = rng.standard_normal(index_shape).astype(dtype)
    expected = a.astype(np.float64)
    np.add.at(expected, _mesh(index, dim), src.astype(np.float64))
    got = fxkit.from_numpy(a).scatter_add(dim, fxkit.from_numpy(index), fxkit.from_numpy(src)).numpy()
    assert got.dtype == dtype
    # one rounding of the exact sum, or a few more for float32 adds in a row: within a few ulp of the
    # largest term that went into a position
    magnitude = np.abs(a).astype(np.float64)
    np.add.at(magnitude, _mesh(index, dim), np.abs(src).astype(np.float64))
    tolerance = 4 * np.finfo(dtype).eps * magnitude
    assert np.all(np.abs(got - expected) <= tolerance)


def test_scatter_add_keeps_non_finite_values():
    a = np.zeros((4, 1024), np.float32)
    index = np.tile(np.arange(1024), (4, 1))
    src = np.ones((4, 1024), np.float32)
    src[0, 3], src[1, 5], src[2, 7] = np.inf, -np.inf, np.nan
    got = fxkit.from_numpy(a).scatter_add(1, fxkit.from_numpy(index), fxkit.from_numpy(src)).numpy()
    assert got[0, 3] == np.inf and got[1, 5] == -np.inf and np.isnan(got[2, 7])
    assert got[3].tolist() == [1.0] * 1024
