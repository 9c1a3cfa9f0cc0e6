"""The numba backend's ``linear`` (fxkit/backends/linear_lowering.py) against float64 products.

A linear layer over 1-D, 2-D and 3-D inputs, with and without bias, float32
and float64, compiled through numba and checked against ``x @ W.T + b`` in
float64; the choice is checked in ``explain()``; a weight written in place
after the first call (an optimizer step) is read again; a weight computed at
run time keeps the registry op.
"""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.nn import functional as F

pytest.importorskip("numba")

TOL = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float64: {"rtol": 1e-12, "atol": 1e-12}}


def _reference(x, weight, bias):
    out = x.astype(np.float64) @ weight.astype(np.float64).T
    return out if bias is None else out + bias.astype(np.float64)


def _compiled(layer, x):
    compiled = fxkit.compile(layer, backend="numba", example_inputs=[fxkit.from_numpy(x)])
    return compiled, compiled(fxkit.from_numpy(x)).numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 3, 7)])
def test_linear_matches_float64_reference(shape, bias, dtype, rng):
    layer = nn.Linear(7, 4, bias=bias).to(dtype)
    x = (rng.random(shape) * 2 - 1).astype(dtype)
    compiled, out = _compiled(layer, x)
    expected = _reference(x, layer.weight.numpy(), layer.bias.numpy() if bias else None)
    assert out.shape == expected.shape and out.dtype == dtype
    np.testing.assert_allclose(out, expected, **TOL[dtype])
    assert "weight kept as (7, 4) C-contiguous" in compiled.explain()


def test_transposed_input_matches_reference(rng):
    """A transposed input (a ViT's ``x.transpose(0, 1)`` before attention) gives the same rows."""
    layer = nn.Linear(6, 3)

    def forward(x):
        return layer(x.transpose(0, 1))

    x = (rng.random((4, 5, 6)) * 2 - 1).astype(np.float32)
    compiled = fxkit.compile(forward, backend="numba", example_inputs=[fxkit.from_numpy(x)])
    expected = _reference(x.transpose(1, 0, 2), layer.weight.numpy(), layer.bias.numpy())
    np.testing.assert_allclose(compiled(fxkit.from_numpy(x)).numpy(), expected, **TOL[np.float32])


def test_weight_written_in_place_is_read_again(rng):
    layer = nn.Linear(6, 5)
    x = (rng.random((3, 6)) * 2 - 1).astype(np.float32)
    compiled, _ = _compiled(layer, x)
    with fxkit.no_grad():
        layer.weight.mul_(-2.0)
    expected = _reference(x, layer.weight.numpy(), layer.bias.numpy())
    np.testing.assert_allclose(compiled(fxkit.from_numpy(x)).numpy(), expected, **TOL[np.float32])


def test_computed_weight_keeps_registry_op(rng):
    weight = fxkit.from_numpy((rng.random((4, 6)) * 2 - 1).astype(np.float32))

    def forward(x):
        return F.linear(x, weight * 2.0 + x.sum())

    x = (rng.random((3, 6)) * 2 - 1).astype(np.float32)
    compiled = fxkit.compile(forward, backend="numba", example_inputs=[fxkit.from_numpy(x)])
    expected = _reference(x, weight.numpy().astype(np.float64) * 2.0 + x.astype(np.float64).sum(), None)
    np.testing.assert_allclose(compiled(fxkit.from_numpy(x)).numpy(), expected, **TOL[np.float32])
    assert "numpy linear (the weight is computed at run time" in compiled.explain()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, out_features", [(1, 3), (2, 4), (5, 67), (24, 130)])
def test_few_rows_kernel_matches_float64_reference(rows, out_features, dtype, rng):
    """Every remainder of the kernel's 4 weight rows by 2 input rows."""
    from fxkit.backends import numba_linear

    x = (rng.random((rows, 300)) * 2 - 1).astype(dtype)
    weight = (rng.random((out_features, 300)) * 2 - 1).astype(dtype)
    bias = (rng.random(out_features) * 2 - 1).astype(dtype)
    out = np.full((rows, out_features), np.nan, dtype)
    numba_linear.few_rows_linear(out, x, weight, bias)
    np.testing.assert_allclose(out, _reference(x, weight, bias), **TOL[dtype])


@pytest.fixture(params=[1, 2], ids=["one-thread-kernel", "threads-blas"])
def numba_threads(request):
    """numba's thread count for the test: one runs the few-rows kernel, more run BLAS."""
    numba = pytest.importorskip("numba")
    if request.param > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has one thread here")
    saved = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(saved)


@pytest.mark.parametrize("bias", [True, False])
def test_few_rows_layer_matches_float64_reference(bias, numba_threads, rng):
    """A ViT-like layer at batch 1 (17 tokens, 256 features in) takes the few-rows path."""
    layer = nn.Linear(256, 70, bias=bias)
    x = (rng.random((1, 17, 256)) * 2 - 1).astype(np.float32)
    compiled, out = _compiled(layer, x)
    expected = _reference(x, layer.weight.numpy(), layer.bias.numpy() if bias else None)
    np.testing.assert_allclose(out, expected, **TOL[np.float32])
    chosen = ("numba kernel linear_few_rows (17 rows on one numba thread: the (70, 256) weight streamed once)"
              if numba_threads == 1 else "BLAS product linear_packed")
    assert chosen in compiled.explain()


@pytest.mark.parametrize("shape", [(2, 17, 512), (1, 17, 512)])
def test_large_weight_keeps_transposed_read(shape, numba_threads, rng):
    """A weight over `PACK_MAX_BYTES` (1.2 MB) gets no (in, out) copy, over many rows or few (where one
    numba thread streams it in its own layout instead)."""
    layer = nn.Linear(512, 600)
    x = (rng.random(shape) * 2 - 1).astype(np.float32)
    compiled, out = _compiled(layer, x)
    np.testing.assert_allclose(out, _reference(x, layer.weight.numpy(), layer.bias.numpy()), **TOL[np.float32])
    few_rows = shape[0] * shape[1] <= 24 and numba_threads == 1
    assert ("numba kernel linear_few_rows" if few_rows else
            "numpy linear (the 600x512 weight streams from memory") in compiled.explain()


def test_bias_rejoins_linear_when_its_add_stays_a_numpy_op(rng):
    """``SplitLinearBias`` moves the bias into an ``add`` so it can join a fused kernel; where the cost
    model keeps numpy's ops for that group (a ReLU over 32 elements), the bias goes back into the
    linear call (`fxkit.backends.split_bias.rejoin_linear_biases`) instead of a separate add pass."""
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU())
    x = (rng.random((1, 64)) * 2 - 1).astype(np.float32)
    compiled, out = _compiled(model, x)
    linear = model[0]
    expected = np.maximum(_reference(x, linear.weight.numpy(), linear.bias.numpy()), 0.0)
    np.testing.assert_allclose(out, expected, **TOL[np.float32])
    assert "numpy ops (add, relu" in compiled.explain()
    assert "np_add(" not in compiled.code and "_0_bias)" in compiled.code
