"""Small-map convolutions gather and scatter batch-last (fxkit/runtime/ops/batch_last_columns.py):
conv2d, conv3d, conv_transpose2d and conv2d_weight_grad over random geometries, against
float64 definitions, on both sides of every switch between the batch-last and plain paths."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import fxkit
from fxkit.runtime.ops.batch_last_columns import SHORT_ROW
from tests.runtime.cases.conv import ref_conv2d, ref_conv_transpose2d

TOL = {"rtol": 2e-4, "atol": 2e-4}


@st.composite
def geometries(draw):
    groups = draw(st.sampled_from([1, 1, 2]))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 2 * SHORT_ROW))
                 for k, d, p in zip(kernel, dilation, padding))
    return dict(n=draw(st.integers(1, 5)), cg=draw(st.integers(1, 6)), ocg=draw(st.integers(1, 40)), groups=groups,
                kernel=kernel, stride=stride, dilation=dilation, padding=padding, size=size)


def _inputs(g, rng):
    x = rng.standard_normal((g["n"], g["cg"] * g["groups"]) + g["size"]).astype(np.float32)
    w = rng.standard_normal((g["ocg"] * g["groups"], g["cg"]) + g["kernel"]).astype(np.float32)
    return x, w


def _args(g):
    return dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"], groups=g["groups"])


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_matches_the_definition(g, seed):
    rng = np.random.default_rng(seed)
    x, w = _inputs(g, rng)
    b = rng.standard_normal(w.shape[0]).astype(np.float32)
    got = fxkit.conv2d(fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(b), **_args(g)).numpy()
    np.testing.assert_allclose(got, ref_conv2d(x.astype(np.float64), w.astype(np.float64), b, **_args(g)), **TOL)


def _ref_weight_grad(x, grad, kernel, stride, padding, dilation, groups):
    """``dW[o, c, i, j]``: the sum over ``n, y, z`` of
    ``grad[n, o, y, z] * x_padded[n, group(o) * Cg + c, y*s + i*d, z*s + j*d]``."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, c, _, _ = x.shape
    oc, oh, ow = grad.shape[1:]
    cg, ocg = c // groups, oc // groups
    out = np.zeros((oc, cg, kh, kw))
    for o in range(oc):
        xs = x[:, (o // ocg) * cg:(o // ocg + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[o, :, i, j] = np.einsum("nchw,nhw->c", patch, grad[:, o])
    return out


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_weight_grad_matches_the_definition(g, seed):
    rng = np.random.default_rng(seed)
    x, w = _inputs(g, rng)
    out_shape = ref_conv2d(x[:1, :, :, :].astype(np.float64), w.astype(np.float64), **_args(g)).shape
    grad = rng.standard_normal((x.shape[0],) + out_shape[1:]).astype(np.float32)
    got = fxkit.ops.conv2d_weight_grad(fxkit.from_numpy(x), w.shape, fxkit.from_numpy(grad), **_args(g)).numpy()
    expected = _ref_weight_grad(x.astype(np.float64), grad.astype(np.float64), g["kernel"], g["stride"],
                                g["padding"], g["dilation"], g["groups"])
    np.testing.assert_allclose(got, expected, **TOL)


@settings(max_examples=60, deadline=None)
@given(g=geometries(), seed=st.integers(0, 2**32 - 1))
def test_conv_transpose2d_matches_the_definition(g, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g["n"], g["cg"] * g["groups"]) + g["size"]).astype(np.float32)
    w = rng.standard_normal((g["cg"] * g["groups"], g["ocg"]) + g["kernel"]).astype(np.float32)
    output_padding = tuple(rng.integers(0, max(s, d)) for s, d in zip(g["stride"], g["dilation"]))
    args = dict(stride=g["stride"], padding=g["padding"], output_padding=output_padding, groups=g["groups"],
                dilation=g["dilation"])
    assume(all((size - 1) * s - 2 * p + d * (k - 1) + op + 1 >= 1 for size, s, p, d, k, op in
               zip(g["size"], g["stride"], g["padding"], g["dilation"], g["kernel"], output_padding)))
    expected = ref_conv_transpose2d(x.astype(np.float64), w.astype(np.float64), **args)
    got = fxkit.conv_transpose2d(fxkit.from_numpy(x), fxkit.from_numpy(w), **args).numpy()
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("size", [(3, 4, 5), (2, 6, SHORT_ROW)], ids=["short-rows", "long-rows"])
def test_conv3d_small_maps_match_conv2d_per_depth_slice(rng, size):
    # A depth-1 kernel makes conv3d a conv2d of every depth slice: a reference from the 2-D definition.
    x = rng.standard_normal((2, 4) + size).astype(np.float32)
    w = rng.standard_normal((6, 4, 1, 3, 3)).astype(np.float32)
    got = fxkit.conv3d(fxkit.from_numpy(x), fxkit.from_numpy(w), padding=(0, 1, 1)).numpy()
    for d in range(size[0]):
        np.testing.assert_allclose(got[:, :, d], ref_conv2d(x[:, :, d].astype(np.float64),
                                                            w[:, :, 0].astype(np.float64), padding=1), **TOL)


@pytest.mark.parametrize("call", [
    lambda x: fxkit.conv2d(x, fxkit.ones(3, 4, 3, 3), padding=1),
    lambda x: fxkit.conv_transpose2d(x, fxkit.ones(4, 3, 3, 3), padding=1),
    lambda x: fxkit.ops.conv2d_weight_grad(x, (4, 4, 3, 3), x, padding=1),
    lambda x: fxkit.max_pool2d(x, 2, return_indices=True)[0],
], ids=["conv2d", "conv_transpose2d", "conv2d_weight_grad", "max_pool2d"])
def test_results_never_share_scratch_memory(rng, call):
    # One image: the batch-last product transposed back is contiguous as it stands, and must still be copied.
    first_input = fxkit.from_numpy(rng.standard_normal((1, 4, 4, 4)).astype(np.float32))
    first = call(first_input)
    kept = first.numpy().copy()
    call(fxkit.from_numpy(rng.standard_normal((1, 4, 4, 4)).astype(np.float32)))
    np.testing.assert_array_equal(first.numpy(), kept)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=geometries(), seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float32, np.float64]))
def test_col2im_loop_gives_the_tap_adds_bits(monkeypatch, g, seed, dtype):
    # NOTE: the patches are the same for every example (the fixture is not reset between them).
    from fxkit.runtime.ops import col2im_loop, loop_gate

    rng = np.random.default_rng(seed)
    assume(g["size"][0] * g["size"][1] < 256)  # maps small enough for the batch-last col2im
    x = rng.standard_normal((g["n"], g["cg"] * g["groups"]) + g["size"]).astype(dtype)
    x[0, 0, 0, 0] = -0.0
    w = rng.standard_normal((g["cg"] * g["groups"], g["ocg"]) + g["kernel"]).astype(dtype)
    args = dict(stride=g["stride"], padding=g["padding"], groups=g["groups"], dilation=g["dilation"])
    assume(all((size - 1) * s - 2 * p + d * (k - 1) + 1 >= 1 for size, s, p, d, k in
               zip(g["size"], g["stride"], g["padding"], g["dilation"], g["kernel"])))
    calls, loop = [], col2im_loop.col2im_nchw
    monkeypatch.setattr(col2im_loop, "col2im_nchw", lambda *a: calls.append(1) or loop(*a))
    monkeypatch.setattr(loop_gate, "LOOP_MIN", 2**62)
    expected = fxkit.conv_transpose2d(fxkit.from_numpy(x), fxkit.from_numpy(w), **args).numpy()
    monkeypatch.setattr(loop_gate, "LOOP_MIN", 1)
    got = fxkit.conv_transpose2d(fxkit.from_numpy(x), fxkit.from_numpy(w), **args).numpy()
    assert calls and got.dtype == dtype
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
