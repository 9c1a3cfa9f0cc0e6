"""The numba backend's training batch norm (`fxkit.backends.batch_norm_lowering`): forward, running statistics
and gradients in every memory layout it reads, against float64 formulas and float64 eager autograd."""
import copy
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import nn
from fxkit.nn import functional as F
from fxkit.transforms import grad

pytest.importorskip("numba")
from fxkit.backends import batch_norm_lowering, conv_lowering  # noqa: E402  (needs numba)
from fxkit.runtime.registry import get_op  # noqa: E402

ORDERS = {"channels-last": (0, 2, 3, 1), "nchw": (0, 1, 2, 3), "channel-major": (1, 0, 2, 3)}


def laid_out(values, order):
    """``values`` (N, C, H, W) in memory laid out in ``order`` (a view of a C-contiguous buffer)."""
    return np.ascontiguousarray(values.transpose(order)).transpose(np.argsort(order))


def reference(x, g, weight, bias, eps):
    """float64 batch norm and its gradients, from the textbook formulas."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    axes = (0, 2, 3)
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    xhat = (x - mean) / np.sqrt(var + eps)
    w = weight.astype(np.float64)[None, :, None, None]
    out = xhat * w + bias.astype(np.float64)[None, :, None, None]
    gx = w / np.sqrt(var + eps) * (g - g.mean(axes, keepdims=True) - xhat * (g * xhat).mean(axes, keepdims=True))
    return out, gx, (g * xhat).sum(axes), g.sum(axes), mean.ravel(), x.var(axes, ddof=1)


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 5), st.integers(1, 5)),
       layout=st.sampled_from(sorted(ORDERS)), grad_layout=st.sampled_from(sorted(ORDERS)),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
def test_calls_match_float64_in_every_layout(shape, layout, grad_layout, dtype, seed):
    if shape[0] * shape[2] * shape[3] < 2:
        return  # one value per channel: batch_norm refuses to train
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    x = laid_out(values, ORDERS[layout])
    g = laid_out(rng.standard_normal(shape).astype(dtype), ORDERS[grad_layout])
    c = shape[1]
    weight, bias = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    running_mean, running_var = np.zeros(c, dtype), np.ones(c, dtype)
    out, gx, gw, gb, mean, unbiased = reference(x, g, weight, bias, 1e-5)
    forward = batch_norm_lowering.BatchNormTraining("bn", get_op("batch_norm"), np.dtype(dtype))
    backward = batch_norm_lowering.BatchNormBackward("bn_grad", get_op("batch_norm_training_backward"),
                                                     np.dtype(dtype))
    tol = 2e-5 if dtype == np.float32 else 1e-11
    got = forward(x, running_mean, running_var, weight, bias, True, 0.1, 1e-5)
    assert batch_norm_lowering.memory_order(got) == batch_norm_lowering.memory_order(x)
    np.testing.assert_allclose(got, out, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(running_mean, 0.1 * mean, rtol=tol, atol=tol)
    np.testing.assert_allclose(running_var, 0.9 + 0.1 * unbiased, rtol=tol, atol=tol)
    got_gx, got_gw, got_gb = backward(g, x, weight, 1e-5)
    scale = np.abs(gx).max() + 1
    np.testing.assert_allclose(got_gx, gx, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(got_gw, gw, rtol=tol, atol=tol * (np.abs(gw).max() + 1))
    np.testing.assert_allclose(got_gb, gb, rtol=tol, atol=tol * (np.abs(gb).max() + 1))


class ConvBn(nn.Module):
    """A batch norm of the input (NCHW), of a conv (channels-last, or channel-major when trained large), one
    without affine parameters, and a BatchNorm1d after a linear layer."""

    def __init__(self):
        super().__init__()
        self.bn_in = nn.BatchNorm2d(3)
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # NOTE: a bias before a batch norm has no gradient
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn_plain = nn.BatchNorm2d(8, affine=False)
        self.head = nn.Linear(8, 4, bias=False)
        self.bn_head = nn.BatchNorm1d(4)

    def forward(self, x, target):
        y = F.relu(self.bn(self.conv(self.bn_in(x))))
        y = F.relu(self.bn_plain(self.conv2(y))) + y
        return ((self.bn_head(self.head(y.mean((2, 3)))) - target) ** 2).mean()


@pytest.mark.parametrize("channel_major", [False, True], ids=["channels-last", "channel-major"])
@pytest.mark.parametrize("dtype, rtol", [(fxkit.float32, 5e-5), (fxkit.float64, 1e-10)])
def test_training_graph_batch_norm_matches_float64_eager(channel_major, dtype, rtol, rng):
    fxkit.manual_seed(0)
    model = ConvBn().to(dtype).train()
    x = fxkit.from_numpy(rng.standard_normal((4, 3, 6, 6)).astype(dtype.np))
    target = fxkit.from_numpy(rng.standard_normal((4, 4)).astype(dtype.np))
    reference = copy.deepcopy(model).double()
    limit = 8 * 8 * 9 if channel_major else conv_lowering.TRAINED_CHANNEL_MAJOR_MIN
    with mock.patch.object(conv_lowering, "TRAINED_CHANNEL_MAJOR_MIN", limit):
        compiled = fxkit.compile(grad(model, example_inputs=[x, target]), backend="numba",
                                 example_inputs=[x, target])
    explained = compiled.explain()
    assert explained.count("batch norm training, numba") == 4
    assert explained.count("batch norm backward, numba") == 4
    assert ("im2col, channel-major" in explained) == channel_major
    for _ in range(2):  # buffers reused; running statistics updated twice
        loss, grads = compiled(x, target)
        reference.zero_grad()
        expected = reference(x.double(), target.double())
        expected.backward()
        assert np.isclose(float(loss), float(expected), rtol=rtol)
        for name, p in reference.named_parameters():
            want = p.grad.numpy()
            assert np.linalg.norm(grads[name].numpy() - want) <= rtol * np.linalg.norm(want), name
    for name, buf in reference.named_buffers():
        np.testing.assert_allclose(dict(model.named_buffers())[name].numpy(), buf.numpy(), rtol=rtol, atol=rtol)


def test_evaluation_mode_and_other_layouts_keep_the_eager_op(rng):
    model = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU()).eval()  # no conv to fold it into
    x = fxkit.from_numpy(rng.standard_normal((2, 3, 5, 5)).astype(np.float32))
    assert "numpy batch_norm (evaluation mode" in fxkit.compile(model, backend="numba", example_inputs=[x]).explain()
    strided = rng.standard_normal((2, 3, 4, 4))[:, :, ::2]  # no layout a kernel reads: the eager op runs
    assert batch_norm_lowering.memory_order(strided) == (None, None)
    call = batch_norm_lowering.BatchNormTraining("bn", get_op("batch_norm"), np.dtype(np.float64))
    out = call(strided, None, None, None, None, True, 0.1, 1e-5)
    expected = (strided - strided.mean((0, 2, 3), keepdims=True)) / np.sqrt(strided.var((0, 2, 3), keepdims=True)
                                                                            + 1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)
