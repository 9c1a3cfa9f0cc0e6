"""Mid-sized convolutions over channels-last columns (fxkit/runtime/ops/channels_last_columns.py): which
convolutions take them, and the forward, the weight gradient and the stride-1 transposed convolution over random
geometries against float64 definitions (called directly, so every drawn geometry runs the channels-last form)."""
import numpy as np
from hypothesis import assume, given, settings, strategies as st

from fxkit.runtime.ops import channels_last_columns as cl
from tests.runtime.cases.conv import ref_conv2d, ref_conv_transpose2d
from tests.runtime.test_batch_last_columns import _ref_weight_grad

TOL = {"rtol": 2e-4, "atol": 2e-4}


def test_resnet18s_mid_sized_layers_take_the_channels_last_columns():
    pays = cl.channels_last_pays
    assert pays(np, 8, 64, (64, 64, 3, 3), (16, 16))  # layer1 at batch 8, 64x64 inputs
    assert pays(np, 8, 128, (128, 128, 3, 3), (8, 8))  # 147k weights: still reordered every call
    assert pays(np, 32, 32, (64, 32, 3, 3), (4, 4))  # the digits Net's second conv
    assert not pays(np, 8, 256, (256, 256, 3, 3), (4, 4))  # 590k weights: reordering them costs more
    assert not pays(np, 8, 3, (64, 3, 7, 7), (32, 32))  # the stem: runs of 3 channels
    assert not pays(np, 8, 64, (128, 64, 1, 1), (8, 8))  # a 1x1 conv needs no columns
    assert not pays(np, 8, 64, (64, 64, 3, 3), (32, 32))  # long rows: the NCHW per-image products win
    assert not pays(np, 1, 128, (128, 128, 3, 3), (14, 14))  # one image: too few columns
    transposed = cl.channels_last_transposed_pays
    assert transposed(np, (8, 64, 32, 32), (64, 64, 3, 3), (1, 1))  # input gradients of any map size
    assert not transposed(np, (8, 64, 16, 16), (64, 64, 3, 3), (3, 1))  # padding past the kernel: a crop


@st.composite
def geometries(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 9)) for k, d, p in zip(kernel, dilation, padding))
    return dict(n=draw(st.integers(1, 4)), c=draw(st.integers(1, 20)), oc=draw(st.integers(1, 12)), kernel=kernel,
                stride=stride, dilation=dilation, padding=padding, size=size)


def _out_sizes(g):
    return tuple((s + 2 * p - d * (k - 1) - 1) // step + 1
                 for s, p, d, k, step in zip(g["size"], g["padding"], g["dilation"], g["kernel"], g["stride"]))


def _layout(x, rng):
    """``x`` as it lies, or an NCHW view of channels-last memory (the forms read any layout)."""
    return x if rng.random() < 0.5 else np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1), with_bias=st.booleans())
def test_the_forward_matches_the_definition(g, seed, with_bias):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g["n"], g["c"]) + g["size"]).astype(np.float32)
    w = rng.standard_normal((g["oc"], g["c"]) + g["kernel"]).astype(np.float32)
    b = rng.standard_normal(g["oc"]).astype(np.float32) if with_bias else None
    pads = tuple((p, p) for p in g["padding"])
    got = cl.conv2d_channels_last(np, _layout(x, rng), w, b, g["stride"], pads, g["dilation"], _out_sizes(g))
    expected = ref_conv2d(x.astype(np.float64), w.astype(np.float64), b, g["stride"], g["padding"], g["dilation"])
    assert got.flags.c_contiguous and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, **TOL)


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1))
def test_the_weight_gradient_matches_the_definition(g, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g["n"], g["c"]) + g["size"]).astype(np.float32)
    grad = rng.standard_normal((g["n"], g["oc"]) + _out_sizes(g)).astype(np.float32)
    pads = tuple((p, p) for p in g["padding"])
    got = cl.weight_grad_channels_last(np, _layout(x, rng), (g["oc"], g["c"]) + g["kernel"], _layout(grad, rng),
                                       g["stride"], pads, g["dilation"])
    expected = _ref_weight_grad(x.astype(np.float64), grad.astype(np.float64), g["kernel"], g["stride"],
                                g["padding"], g["dilation"], 1)
    assert got.flags.c_contiguous and got.base is None  # an array of its own: .grad takes it without a copy
    np.testing.assert_allclose(got, expected, **TOL)


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1))
def test_the_stride_1_transposed_convolution_matches_the_definition(g, seed):
    rng = np.random.default_rng(seed)
    kh, kw = g["kernel"]
    padding = (min(g["padding"][0], kh - 1), min(g["padding"][1], kw - 1))
    x = rng.standard_normal((g["n"], g["c"]) + g["size"]).astype(np.float32)
    w = rng.standard_normal((g["c"], g["oc"], kh, kw)).astype(np.float32)
    out_hw = tuple(s + k - 1 - 2 * p for s, k, p in zip(g["size"], g["kernel"], padding))
    assume(min(out_hw) >= 1)
    got = cl.conv_transpose2d_channels_last(np, _layout(x, rng), w, padding, out_hw)
    expected = ref_conv_transpose2d(x.astype(np.float64), w.astype(np.float64), padding=padding)
    np.testing.assert_allclose(got, expected, **TOL)
