"""The numba backend's conv gradients (`fxkit.backends.conv_grad_lowering`): ``conv2d_weight_grad`` and
``conv_transpose2d`` as channel-major products, against float64 references (an adjoint identity for the
col2im kernel, eager float64 autograd for whole training graphs)."""
import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import nn
from fxkit.nn import functional as F
from fxkit.transforms import grad

pytest.importorskip("numba")
from fxkit.backends import numba_conv  # noqa: E402  (needs numba)
from fxkit.backends.conv_lowering import channel_major_columns  # noqa: E402


def columns64(x, kh, kw, pads, stride, dilation):
    """The float64 reference im2col: ``(C*KH*KW, N*OH*OW)``, taps in a weight's order, zeros in the padding."""
    (pt, pb), (pl, pr) = pads
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, w = x.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((c, kh, kw, n, oh, ow))
    for p in range(kh):
        for q in range(kw):
            taps = x[:, :, p * dh:p * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw]
            cols[:, p, q] = taps.transpose(1, 0, 2, 3)
    return cols.reshape(c * kh * kw, n * oh * ow), (oh, ow)


geometries = st.tuples(
    st.integers(1, 3), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9),  # n, c, h, w
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),  # kh, kw, sh, sw
    st.integers(0, 2), st.integers(0, 2), st.integers(1, 2), st.integers(1, 2))  # ph, pw, dh, dw


@settings(max_examples=60, deadline=None)
@given(geometry=geometries, channels_last=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_im2col_and_col2im_are_adjoint(geometry, channels_last, seed):
    """``<im2col(x), y> == <x, col2im(y)>`` for every geometry (padding, stride, dilation), and the columns
    equal the float64 reference's, whatever the input's memory layout."""
    n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw = geometry
    pads, stride, dilation = ((ph, ph), (pw, pw)), (sh, sw), (dh, dw)
    if h + 2 * ph < dh * (kh - 1) + 1 or w + 2 * pw < dw * (kw - 1) + 1:
        return  # the kernel does not fit the padded input
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c) if channels_last else (n, c, h, w))
    x = x.transpose(0, 3, 1, 2) if channels_last else x
    expected, (oh, ow) = columns64(x, kh, kw, pads, stride, dilation)
    np.testing.assert_array_equal(channel_major_columns(x, kh, kw, pads, stride, dilation, []), expected)
    y = rng.standard_normal(expected.shape)
    out = np.full((n, c, h, w), np.nan)
    numba_conv.col2im_channel_major(out, y.reshape(-1, n * oh, ow), kh, kw, sh, sw, ph, pw, dh, dw)
    assert np.isclose((expected * y).sum(), (x * out).sum(), rtol=1e-12, atol=1e-12)


class SumOfSquares(nn.Module):
    """``model``'s outputs squared and summed: a loss for a training graph of any model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return (self.model(x) ** 2).sum()


class Upsampler(nn.Module):
    """Every geometry the rules take (a 7x7 stride-2 stem, stride, dilation, a 1x1 stride-2 conv, a
    transposed conv with output padding and bias) and one they leave to eager (two groups)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.dilated = nn.Conv2d(16, 16, 3, padding=2, dilation=2)
        self.squeeze = nn.Conv2d(16, 12, 1, stride=2)
        self.up = nn.Parameter(fxkit.randn(12, 6, 3, 3) * 0.2)
        self.up_bias = nn.Parameter(fxkit.randn(6))
        self.grouped = nn.Conv2d(6, 6, 3, padding=1, groups=2)

    def forward(self, x, target):
        y = F.relu(self.stem(x))
        y = F.relu(self.down(y))
        y = F.relu(self.dilated(y)) + y
        y = self.squeeze(y)
        y = F.conv_transpose2d(y, self.up, self.up_bias, stride=2, padding=1, output_padding=1)
        return ((self.grouped(y) - target) ** 2).mean()


@pytest.mark.parametrize("layout", ["channels-last", "channel-major"])
@pytest.mark.parametrize("dtype, rtol", [(fxkit.float32, 2e-5), (fxkit.float64, 1e-11)])
def test_training_graph_gradients_match_float64_eager(layout, dtype, rtol, rng):
    """Small weights take channels-last columns and stride-1 transposed convs run as convs; from
    TRAINED_CHANNEL_MAJOR_MIN elements (here every weight) channel-major columns and col2im."""
    from unittest import mock

    from fxkit.backends import conv_lowering

    fxkit.manual_seed(0)
    model = Upsampler().to(dtype)
    x = fxkit.from_numpy(rng.standard_normal((2, 3, 32, 32)).astype(dtype.np))
    target = fxkit.from_numpy(rng.standard_normal((2, 6, 8, 8)).astype(dtype.np))
    limit = conv_lowering.TRAINED_CHANNEL_MAJOR_MIN if layout == "channels-last" else 1
    with mock.patch.object(conv_lowering, "TRAINED_CHANNEL_MAJOR_MIN", limit):
        compiled = fxkit.compile(grad(model, example_inputs=[x, target]), backend="numba",
                                 example_inputs=[x, target])
    loss, grads = compiled(x, target)

    reference = copy.deepcopy(model).double()
    expected_loss = reference(x.double(), target.double())
    expected_loss.backward()
    assert np.isclose(float(loss), float(expected_loss), rtol=rtol)
    for name, p in reference.named_parameters():
        got, want = grads[name].numpy(), p.grad.numpy()
        assert got.shape == want.shape and got.flags.c_contiguous, name
        assert np.linalg.norm(got - want) <= rtol * np.linalg.norm(want), name

    explained = compiled.explain()
    if layout == "channels-last":
        assert "weight gradient, channel-major columns" not in explained
        assert explained.count("weight gradient, channels-last columns") == 5  # the transposed conv's too
        assert explained.count("transposed conv as a conv, channels-last") == 1  # the dilated conv's input grad
        assert "transposed conv, channel-major col2im" in explained  # stride 2 (the model's own, the down conv's)
    else:
        assert "weight gradient, channels-last columns" not in explained
        assert "transposed conv as a conv" not in explained
    assert "2 groups" in explained  # the grouped conv's gradients stay eager's


def test_a_second_step_sees_the_optimizer_s_new_weights(rng):
    """The transposed conv multiplies the weight as it lies: after an in-place update its gradients are the
    new weights' (no packed copy to go stale)."""
    fxkit.manual_seed(1)
    model = Upsampler()
    x = fxkit.from_numpy(rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    target = fxkit.from_numpy(rng.standard_normal((1, 6, 4, 4)).astype(np.float32))
    compiled = fxkit.compile(grad(model, example_inputs=[x, target]), backend="numba", example_inputs=[x, target])
    compiled(x, target)
    with fxkit.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    _, grads = compiled(x, target)
    reference = copy.deepcopy(model).double()
    reference(x.double(), target.double()).backward()
    for name, p in reference.named_parameters():
        want = p.grad.numpy()
        assert np.linalg.norm(grads[name].numpy() - want) <= 2e-5 * np.linalg.norm(want), name


def test_a_training_graph_multiplies_its_large_weights_as_they_lie(rng):
    """A conv whose weight an optimizer writes between calls (it also feeds the input gradient's transposed
    conv) runs channel-major from TRAINED_CHANNEL_MAJOR_MIN elements: channels-last would repack the weight
    every step. Smaller weights and inference graphs keep channels-last im2col."""
    from unittest import mock

    from fxkit.backends import conv_lowering

    model = nn.Sequential(nn.Conv2d(5, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1))
    x = fxkit.from_numpy(rng.standard_normal((2, 5, 6, 6)).astype(np.float32))

    with mock.patch.object(conv_lowering, "TRAINED_CHANNEL_MAJOR_MIN", 8 * 16 * 9):
        training = fxkit.compile(grad(SumOfSquares(model), example_inputs=[x]), backend="numba", example_inputs=[x])
        inference = fxkit.compile(model, backend="numba", example_inputs=[x])
    choices = {d.node: d.choice for d in training._last.lowered.decisions if d.node in ("conv2d", "conv2d_1")}
    assert choices == {"conv2d": "im2col, channels-last", "conv2d_1": "im2col, channel-major"}
    assert [d.choice for d in inference._last.lowered.decisions if d.node.startswith("conv2d")] == \
        ["im2col, channels-last", "im2col, channels-last"]
    loss, grads = training(x)
    reference = copy.deepcopy(model).double()
    expected = (reference(x.double()) ** 2).sum()
    expected.backward()
    assert np.isclose(float(loss), float(expected), rtol=1e-5)
    for name, p in reference.named_parameters():
        want = p.grad.numpy()
        assert np.linalg.norm(grads["model." + name].numpy() - want) <= 2e-5 * np.linalg.norm(want), name


def test_weight_gradients_a_caller_keeps_are_never_written_again(rng):
    """Weight gradients come from a pool of buffers: one the caller (an optimizer's ``.grad``) still holds is
    not handed out by the next call."""
    fxkit.manual_seed(2)
    model = Upsampler()
    x = fxkit.from_numpy(rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    target = fxkit.from_numpy(rng.standard_normal((1, 6, 4, 4)).astype(np.float32))
    compiled = fxkit.compile(grad(model, example_inputs=[x, target]), backend="numba", example_inputs=[x, target])
    _, first = compiled(x, target)
    kept = {name: g.numpy().copy() for name, g in first.items()}
    for _ in range(3):
        compiled(fxkit.from_numpy(rng.standard_normal((1, 3, 16, 16)).astype(np.float32)), target)
    for name, g in first.items():
        np.testing.assert_array_equal(g.numpy(), kept[name], err_msg=name)


def test_a_channel_major_weight_gradient_takes_its_forward_conv_s_columns(rng):
    """A weight gradient of the forward conv's own input and geometry reads the columns that conv gathered,
    once, and only from that very input unwritten since; the gradients still match float64 eager."""
    from unittest import mock

    from fxkit.backends import conv_grad_lowering, conv_lowering

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, stride=2))

    x = fxkit.from_numpy(rng.standard_normal((2, 3, 9, 9)).astype(np.float64))
    model.double()
    with mock.patch.object(conv_lowering, "TRAINED_CHANNEL_MAJOR_MIN", 1):
        compiled = fxkit.compile(grad(SumOfSquares(model), example_inputs=[x]), backend="numba", example_inputs=[x])
    calls = compiled._last.lowered.fn.__globals__
    linked_calls = [c for c in calls.values() if isinstance(c, conv_grad_lowering.WeightGradConv) and c.forward]
    assert len(linked_calls) == 2  # both convs' weights are trained, the first's too (its input needs no gradient)
    (linked,) = [c for c in linked_calls if c.stride == (2, 2)]
    gathered = []
    original = conv_grad_lowering.channel_major_columns
    with mock.patch.object(conv_grad_lowering, "channel_major_columns",
                           lambda *a, **k: gathered.append(a[0].shape) or original(*a, **k)):
        _, grads = compiled(x)
    assert (2, 8, 9, 9) not in gathered  # the second conv's input: its columns came from the forward
    assert linked.forward.kept is None  # handed over once
    reference = copy.deepcopy(model)
    (reference(x) ** 2).sum().backward()
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(grads["model." + name].numpy(), p.grad.numpy(), rtol=1e-10, atol=1e-10)

    # another array than the one the forward gathered from: the gradient gathers its own columns
    forward = linked.forward
    weight = model[2].weight.numpy()
    first = rng.standard_normal((2, 8, 9, 9))
    forward(first, weight, None)
    other = rng.standard_normal((2, 8, 9, 9))
    g = rng.standard_normal((2, 8, 5, 5))
    got = linked(other, weight.shape, g)
    expected = conv_grad_lowering.WeightGradConv("fresh", _meta(weight.shape),
                                                 linked.pads, linked.stride, linked.dilation)(other, weight.shape, g)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def _meta(shape):
    from fxkit.runtime.meta import TensorMeta

    return TensorMeta(tuple(shape), fxkit.float64, fxkit.device("cpu"))
