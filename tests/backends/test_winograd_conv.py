"""Winograd 3x3 convs (`fxkit.backends.winograd_conv`) against a float64 direct convolution, within a
tolerance derived from the arithmetic, and the numba backend's choice of them."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.transforms import grad
from fxkit.runtime.meta import TensorMeta

pytest.importorskip("numba")
from fxkit.backends import winograd_conv  # noqa: E402  (needs numba)

EPS = float(np.finfo(np.float32).eps)


def direct_conv64(x, weight, bias, pads):
    """The float64 reference: each output a sum over its 3x3 window, padding ``((top, bottom), (left, right))``."""
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), *pads))
    n, c, h, w = x.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # (N, C, OH, OW, 3, 3)
    out = np.einsum("nchwij,ocij->nohw", windows, np.asarray(weight, np.float64))
    return out if bias is None else out + np.asarray(bias, np.float64)[:, None, None]


def tolerance(x, weight, pads, transforms):
    """Per output, the float32 rounding error Winograd may make: direct convolution's ``sqrt(9 C) eps``
    relative to the sum of the magnitudes it adds (``|x| * |w|``), grown by the transforms' norms."""
    magnitude = direct_conv64(np.abs(x), np.abs(weight), None, pads)
    return winograd_conv.transform_growth(transforms) * np.sqrt(9 * x.shape[1]) * EPS * magnitude


def run_winograd(x, weight, bias, pads, transforms):
    n, c, h, w = x.shape
    out_shape = (n, weight.shape[0], h + sum(pads[0]) - 2, w + sum(pads[1]) - 2)
    call = winograd_conv.WinogradConv("conv", TensorMeta(out_shape, fxkit.float32), pads, transforms)
    return call, call(x, weight, bias)


# (input shape, output channels, padding, bias)
SHAPES = [
    ((2, 5, 9, 7), 6, ((1, 1), (1, 1)), True),     # odd map, tiles past the edge
    ((1, 3, 11, 10), 4, ((0, 0), (0, 0)), False),  # batch 1, no padding, no bias
    ((1, 16, 8, 8), 24, ((0, 0), (0, 0)), True),   # the map exactly tiled
    ((3, 17, 13, 6), 9, ((1, 1), (1, 1)), False),  # channels not a multiple of a vector
    ((1, 8, 7, 12), 8, ((1, 2), (0, 1)), True),    # uneven padding
]


@pytest.mark.parametrize("transforms", [winograd_conv.F2, winograd_conv.F4], ids=repr)
@pytest.mark.parametrize("shape, out_channels, pads, has_bias", SHAPES)
def test_winograd_matches_float64_direct_conv(shape, out_channels, pads, has_bias, transforms, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, shape[1], 3, 3)).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32) if has_bias else None
    call, got = run_winograd(x, weight, bias, pads, transforms)
    expected = direct_conv64(x, weight, bias, pads)
    assert got.shape == expected.shape
    bound = tolerance(x, weight, pads, transforms) + (0 if bias is None else EPS * np.abs(expected))
    assert np.all(np.abs(got - expected) <= bound)
    x2 = rng.standard_normal(shape).astype(np.float32)  # a second call runs on the kept buffers
    weight2 = rng.standard_normal(weight.shape).astype(np.float32)  # a new weight array is transformed again
    expected2 = direct_conv64(x2, weight2, bias, pads)
    bound2 = tolerance(x2, weight2, pads, transforms) + (0 if bias is None else EPS * np.abs(expected2))
    assert np.all(np.abs(call(x2, weight2, bias) - expected2) <= bound2)


def test_winograd_reads_a_channels_last_input_in_place(rng):
    x = rng.standard_normal((2, 6, 5, 8)).astype(np.float32)
    weight = rng.standard_normal((7, 6, 3, 3)).astype(np.float32)
    pads = ((1, 1), (1, 1))
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    _, got = run_winograd(channels_last, weight, None, pads, winograd_conv.F2)
    assert np.all(np.abs(got - direct_conv64(x, weight, None, pads)) <= tolerance(x, weight, pads, winograd_conv.F2))
    assert got.transpose(0, 2, 3, 1).flags.c_contiguous  # the result is channels-last memory too


def _choice(conv, shape, rng):
    x = fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))
    compiled = fxkit.compile(conv, backend="numba", example_inputs=[x])
    (decision,) = [d for d in compiled._last.lowered.decisions if d.node.startswith("conv2d")]
    return decision.choice, compiled, x


def test_numba_backend_picks_winograd_for_large_3x3_convs_and_matches_pytorch(rng):
    torch = pytest.importorskip("torch")
    conv = nn.Conv2d(128, 128, 3, padding=1).eval()
    choice, compiled, x = _choice(conv, (1, 128, 14, 14), rng)
    assert choice == "Winograd F(2x2, 3x3), channels-last"
    reference = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(conv.weight.numpy()),
                                           torch.from_numpy(conv.bias.numpy()), padding=1).numpy()
    np.testing.assert_allclose(compiled(x).numpy(), reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(512, 512, 3, padding=1), (1, 512, 7, 7)),  # too few output pixels
    (nn.Conv2d(64, 64, 3, padding=1), (8, 64, 28, 28)),  # too few channels
    (nn.Conv2d(256, 256, 3, stride=2, padding=1), (8, 256, 56, 56)),  # strided
], ids=["batch-1", "64-channels", "stride-2"])
def test_numba_backend_keeps_im2col_where_winograd_does_not_win(conv, shape, rng):
    choice, _, _ = _choice(conv.eval(), shape, rng)
    assert "Winograd" not in choice


def test_training_graphs_keep_their_convs_off_winograd(rng):
    """A conv whose weight an optimizer writes between calls would have its filters transformed again every
    step, and its weight gradient could not reuse the forward's columns: the same conv Winograd takes in
    an inference graph runs im2col in a training graph, and its gradients match a float64 reference."""
    from tests.backends.test_conv_grad_lowering import SumOfSquares

    torch = pytest.importorskip("torch")
    conv = nn.Conv2d(128, 128, 3, padding=1)
    x = fxkit.from_numpy(rng.standard_normal((1, 128, 14, 14)).astype(np.float32))
    inference = fxkit.compile(conv.eval(), backend="numba", example_inputs=[x])
    training = fxkit.compile(grad(SumOfSquares(conv), example_inputs=[x]), backend="numba", example_inputs=[x])
    assert [d.choice for d in inference._last.lowered.decisions if d.node == "conv2d"] == \
        ["Winograd F(2x2, 3x3), channels-last"]
    (choice,) = [d.choice for d in training._last.lowered.decisions if d.node == "conv2d"]
    assert "Winograd" not in choice
    loss, grads = training(x)
    reference = torch.nn.Conv2d(128, 128, 3, padding=1).double()
    reference.load_state_dict({k: torch.from_numpy(v.numpy().astype(np.float64)) for k, v in conv.state_dict().items()})
    (reference(torch.from_numpy(x.numpy()).double()) ** 2).sum().backward()
    for name, p in reference.named_parameters():
        want = p.grad.numpy()
        assert np.linalg.norm(grads["model." + name].numpy() - want) <= 2e-5 * np.linalg.norm(want), name
