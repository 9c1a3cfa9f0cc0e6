"""The numba backend's max pool with indices and its backward (`fxkit.backends.numba_conv.max_pool_nhwc`,
`fxkit.backends.scatter_lowering`'s pool backward and scatters): indices against a window-by-window reference, training graphs' gradients
against float64 eager autograd, scatters against float64 numpy."""
import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import nn, ops
from fxkit.errors import IndexOutOfRangeError
from fxkit.nn import functional as F
from fxkit.transforms import grad

pytest.importorskip("numba")
from fxkit.backends import numba_conv  # noqa: E402  (needs numba)


def pool_reference(x, kh, kw, sh, sw, ph, pw):
    """PyTorch's scan, window by window: from the first tap inside the input, a tap replaces the maximum
    when strictly greater or NaN; indices are flat into each ``H * W`` plane."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    values, indices = np.empty((n, c, oh, ow), x.dtype), np.empty((n, c, oh, ow), np.int64)
    for image in range(n):
        for ch in range(c):
            for y in range(oh):
                for xo in range(ow):
                    best, where = None, None
                    for p in range(kh):
                        for q in range(kw):
                            iy, ix = y * sh - ph + p, xo * sw - pw + q
                            if 0 <= iy < h and 0 <= ix < w:
                                v = x[image, ch, iy, ix]
                                if best is None or v > best or np.isnan(v):
                                    best, where = v, iy * w + ix
                    values[image, ch, y, xo], indices[image, ch, y, xo] = best, where
    return values, indices


@settings(max_examples=60, deadline=None)
@given(geometry=st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 8), st.integers(1, 8),
                          st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
       padding=st.tuples(st.integers(0, 1), st.integers(0, 1)), seed=st.integers(0, 2**32 - 1))
def test_pool_indices_match_the_window_scan(geometry, padding, seed):
    """Ties (small integers) keep the first tap, the last NaN of a window wins, padding never does."""
    n, c, h, w, kh, kw, sh, sw = geometry
    ph, pw = min(padding[0], kh // 2), min(padding[1], kw // 2)
    if h + 2 * ph < kh or w + 2 * pw < kw:
        return
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, (n, c, h, w)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    values, indices = pool_reference(x, kh, kw, sh, sw, ph, pw)
    rows = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    out = np.empty(values.transpose(0, 2, 3, 1).shape, np.float32)
    where = np.empty(out.shape, np.int64)
    numba_conv.max_pool_nhwc(out, rows, kh, kw, sh, sw, ph, pw, where)
    np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), values)
    np.testing.assert_array_equal(where.transpose(0, 3, 1, 2), indices)


def test_a_pool_with_indices_of_an_nchw_input_matches_eager(rng):
    """An input in NCHW memory (not a conv's result) is copied channels-last for the kernel."""
    def pool(x):
        return F.max_pool2d(x, 3, 2, 1, return_indices=True)

    x = fxkit.from_numpy(rng.standard_normal((2, 5, 9, 7)).astype(np.float32))
    compiled = fxkit.compile(pool, backend="numba", example_inputs=[x])
    assert "max pool with indices, channels-last" in compiled.explain()
    values, indices = compiled(x)
    expected_values, expected_indices = pool_reference(x.numpy(), 3, 3, 2, 2, 1, 1)
    np.testing.assert_array_equal(values.numpy(), expected_values)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)


class PoolNet(nn.Module):
    """A conv, an overlapping pool (ResNet's stem: scatter_add backward), a conv, a tiling pool (scatter
    backward), a flattening view and a linear layer."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Conv2d(8, 6, 3, padding=1)
        self.head = nn.Linear(6 * 2 * 2, 5)

    def forward(self, x, target):
        y = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        y = F.relu(F.max_pool2d(self.body(y), 2))
        return F.cross_entropy(self.head(y.view(y.shape[0], -1)), target)


@pytest.mark.parametrize("dtype, rtol", [(fxkit.float32, 2e-5), (fxkit.float64, 1e-11)])
def test_training_graph_pool_gradients_match_float64_eager(dtype, rtol, rng):
    fxkit.manual_seed(0)
    model = PoolNet().to(dtype)
    x = fxkit.from_numpy(rng.standard_normal((4, 3, 8, 8)).astype(dtype.np))
    target = fxkit.from_numpy(rng.integers(0, 5, 4).astype(np.int64))
    compiled = fxkit.compile(grad(model, example_inputs=[x, target]), backend="numba", example_inputs=[x, target])
    explained = compiled.explain()
    assert explained.count("max pool with indices, channels-last") == 2
    assert explained.count("max pool backward rows, numba") == 2
    assert "overlapping windows: each gradient added" in explained and "each gradient written" in explained
    reference = copy.deepcopy(model).double()
    for inputs in (x, fxkit.from_numpy(rng.standard_normal((4, 3, 8, 8)).astype(dtype.np))):  # buffers reused
        loss, grads = compiled(inputs, target)
        reference.zero_grad()
        expected = reference(inputs.double(), target)
        expected.backward()
        assert np.isclose(float(loss), float(expected), rtol=rtol)
        for name, p in reference.named_parameters():
            want = p.grad.numpy()
            assert np.linalg.norm(grads[name].numpy() - want) <= rtol * np.linalg.norm(want), name


def scatter_reference(data, index, src, add):
    out = np.asarray(data, np.float64).copy()
    for r in np.ndindex(index.shape[:-1]):
        for j in range(index.shape[-1]):
            if add:
                out[r + (index[r + (j,)],)] += src[r + (j,)]
            else:
                out[r + (index[r + (j,)],)] = src[r + (j,)]
    return out


@pytest.mark.parametrize("how", ["scatter", "scatter_add", "reduce_add"])
def test_scatter_along_the_last_dimension_matches_float64(how, rng):
    data = rng.standard_normal((3, 4, 6)).astype(np.float32)
    index = rng.integers(0, 6, (3, 4, 5))  # repeated indices: added up, or the last write kept
    if how == "scatter":
        index = np.argsort(rng.random((3, 4, 6)), axis=-1)[..., :5]  # distinct: PyTorch leaves repeats undefined
    src = rng.standard_normal((3, 4, 5)).astype(np.float32)

    def f(a, i, s):
        if how == "scatter":
            return ops.scatter(a, -1, i, s)
        if how == "scatter_add":
            return ops.scatter_add(a, 2, i, s)
        return ops.scatter(a, 2, i, s, reduce="add")

    args = [fxkit.from_numpy(v) for v in (data, index, src)]
    compiled = fxkit.compile(f, backend="numba", example_inputs=args)
    assert "rows, numba" in compiled.explain()
    expected = scatter_reference(data, index, src, how != "scatter")
    np.testing.assert_allclose(compiled(*args).numpy(), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(data, args[0].numpy())  # the input is not written


def test_an_out_of_range_scatter_index_raises_the_eager_error(rng):
    data, src = fxkit.zeros(2, 4), fxkit.ones(2, 3)
    good = fxkit.from_numpy(np.array([[0, 1, 2], [3, 2, 1]]))
    compiled = fxkit.compile(lambda a, i, s: ops.scatter_add(a, 1, i, s), backend="numba",
                             example_inputs=[data, good, src])
    with pytest.raises(IndexOutOfRangeError, match="index 4 is out of bounds for dimension 1 with size 4"):
        compiled(data, fxkit.from_numpy(np.array([[0, 1, 2], [3, 4, 1]])), src)


def test_a_scatter_along_another_dimension_stays_eager(rng):
    data, src = fxkit.zeros(4, 3), fxkit.ones(2, 3)
    index = fxkit.from_numpy(np.array([[0, 1, 2], [3, 2, 1]]))
    compiled = fxkit.compile(lambda a, i, s: ops.scatter_add(a, 0, i, s), backend="numba",
                             example_inputs=[data, index, src])
    assert "numpy scatter_add" in compiled.explain() and "not the last" in compiled.explain()
    np.testing.assert_array_equal(compiled(data, index, src).numpy(),
                                  [[1, 0, 0], [0, 1, 1], [0, 1, 1], [1, 0, 0]])
