"""Float outputs of integer kernels (``dtype=fxkit.float32``, `convert`'s ``float_outputs``).

A layer whose output only float ops read writes its int32 accumulator dequantized: the
kernels must give ``acc * input_scale * weight_scale`` on every engine (against the
independent int64 accumulators of tests/quantization/int_reference.py and a float64
product), and a converted residual block must compute, at that layer, the float
convolution of its quantized input within the weight's quantization step.
"""
import numpy as np
import pytest

import fxkit
import fxkit.backends  # noqa: F401  (registers the numba engine)
from fxkit import nn
from fxkit.graph import Interpreter
from fxkit.nn import functional as F
from fxkit.transforms.quantize import calibrate, convert, per_channel_qconfig, prepare
from tests.quantization import int_reference as ref
from tests.quantization.engines import ENGINES, running_on



def _factors(rng, channels):
    """Per-channel ``(multiplier, shift)`` of reals like ``input_scale * weight_scale``, and the reals
    they encode, evaluated here from gemmlowp's definition on Python numbers."""
    multiplier, shift = ref.multipliers_for(rng.uniform(1e-5, 3e-3, channels))
    encoded = np.array([int(m) * 2.0 ** (int(s) - 31) for m, s in zip(multiplier, shift)])
    return multiplier, shift, encoded


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("groups", [1, 2])
def test_float32_output_is_the_dequantized_accumulator(engine, rng, relu, groups):
    x = rng.integers(-128, 128, (2, 6, 7, 8)).astype(np.int8)
    w = rng.integers(-127, 128, (6, 6 // groups, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 6).astype(np.int32)
    w_zp = rng.integers(-3, 4, 6)
    multiplier, shift, encoded = _factors(rng, 6)
    acc = ref.conv2d_accumulators(x, w, bias, 5, w_zp, (1, 2), (1, 1), (1, 1), groups)
    expected = acc.astype(np.float64) * encoded[None, :, None, None]
    if relu:
        expected = np.maximum(expected, 0.0)
    with running_on(engine):
        out = fxkit.quantized_conv2d(fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), 5,
                                     fxkit.from_numpy(w_zp.astype(np.int32)), fxkit.from_numpy(multiplier.astype(np.int32)),
                                     fxkit.from_numpy(shift.astype(np.int32)), 0, stride=(1, 2), padding=1, groups=groups,
                                     dtype=fxkit.float32, relu=relu)
    assert out.dtype is fxkit.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())

    wl = w.reshape(6, -1)
    xl = x.reshape(2, -1)[:, :wl.shape[1]]
    acc = ref.linear_accumulators(xl, wl, bias, -3, np.zeros(6, np.int64))
    expected = acc.astype(np.float64) * encoded[None, :]
    with running_on(engine):
        out = fxkit.quantized_linear(fxkit.from_numpy(np.ascontiguousarray(xl)), fxkit.from_numpy(np.ascontiguousarray(wl)),
                                     fxkit.from_numpy(bias), -3, 0, fxkit.from_numpy(multiplier.astype(np.int32)),
                                     fxkit.from_numpy(shift.astype(np.int32)), 0, dtype=fxkit.float32)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())


def test_float32_output_refuses_a_zero_point(rng):
    x = fxkit.from_numpy(rng.integers(-128, 128, (2, 4)).astype(np.int8))
    w = fxkit.from_numpy(rng.integers(-127, 128, (3, 4)).astype(np.int8))
    with pytest.raises(fxkit.errors.ShapeError, match="quantized_linear: a float32 output .* output_zero_point 3"):
        fxkit.quantized_linear(x, w, None, 0, 0, 2 ** 30, -5, 3, dtype=fxkit.float32)


class ResidualBlock(nn.Module):
    """conv -> relu -> conv, added to the block's input, relu, then a classifier: the second conv
    and the classifier are read only by float ops (the add, the graph output)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = F.relu(x + self.conv2(F.relu(self.conv1(x))))
        return self.fc(y.flatten(1))


def _values(gm, x):
    interpreter = Interpreter(gm, garbage_collect_values=False)
    interpreter.run(x)
    return {node.name: value for node, value in interpreter.env.items()}


def test_residual_conv_and_classifier_write_float_within_the_weight_step(rng):
    fxkit.manual_seed(0)
    model = ResidualBlock().eval()
    data = [fxkit.from_numpy(rng.standard_normal((3, 4, 6, 6)).astype(np.float32)) for _ in range(4)]
    prepared = calibrate(prepare(model, per_channel_qconfig), data, progress=False)
    quantized = convert(prepared, report=False, float_outputs=True)
    assert quantized.conversion_report.float_outputs == ["conv2", "fc"]
    kernels = {n.name: n for n in quantized.graph.nodes if n.op == "call" and getattr(n.target, "name", "")
               in ("quantized_conv2d", "quantized_linear")}
    assert [kernels[k].kwargs["dtype"] for k in ("conv1_q", "conv2_q", "fc_q")] == [fxkit.int8, fxkit.float32,
                                                                                  fxkit.float32]
    assert not any(n.is_op(fxkit.ops.dequantize_affine) for n in kernels["conv2_q"].users)
    int8_only = convert(prepared, report=False)
    assert int8_only.conversion_report.float_outputs == []

    x = data[0]
    values = _values(quantized, x)
    qin = kernels["conv1_q"].meta["qparams"]
    conv2_input = (values["conv1_q"].numpy().astype(np.float64) - qin.zero_point) * qin.scale
    weight = model.conv2.weight.numpy().astype(np.float64)
    bias = model.conv2.bias.numpy().astype(np.float64)
    padded = np.pad(conv2_input, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (n, c, 6, 6, 3, 3)
    expected = np.einsum("nchwij,ocij->nohw", windows, weight) + bias[None, :, None, None]
    magnitude = np.einsum("nchwij,ocij->nohw", np.abs(windows), np.ones_like(weight))
    w_step = np.abs(weight).reshape(4, -1).max(1) / 127  # per-channel symmetric int8
    # half a weight step per product, half a bias step (input_scale * weight_step), float32 rounding
    bound = 0.5 * w_step[None, :, None, None] * (magnitude + qin.scale) + 1e-5 * np.abs(expected).max()
    error = np.abs(values["conv2_q"].numpy() - expected)
    assert values["conv2_q"].numpy().dtype == np.float32
    assert np.all(error <= bound) and error.max() > 0

    reference = model(x).numpy().astype(np.float64)
    for gm in (quantized, int8_only):
        assert np.abs(gm(x).numpy() - reference).max() < 0.05 * np.abs(reference).max()


class ConvReLU6Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.avg_pool2d(F.relu6(self.conv(x)), 2)


def test_a_float_output_keeps_relu6_as_a_float_op():
    """ReLU6 fused into an int8 kernel is the output grid's saturation; a float output has no grid,
    so the ReLU6 stays a node after the kernel and still clamps at 6."""
    fxkit.manual_seed(0)
    rng = np.random.default_rng(0)  # NOTE: seeded: inputs scaled by 3 put pre-activations well past 6
    model = ConvReLU6Pool().eval()
    with fxkit.no_grad():
        model.conv.weight.numpy()[...] *= 4  # pre-activations well beyond 6
    data = [fxkit.from_numpy(3 * rng.standard_normal((2, 3, 6, 6)).astype(np.float32)) for _ in range(3)]
    prepared = calibrate(prepare(model, per_channel_qconfig), data, progress=False)
    quantized = convert(prepared, report=False, float_outputs=True)
    calls = [(n.target.name, n.kwargs.get("relu")) for n in quantized.graph.nodes if n.op == "call"]
    assert calls == [("quantize_affine", None), ("quantized_conv2d", False), ("relu6", None), ("avg_pool2d", None)]
    x = data[0]
    relu6_node = next(n for n in quantized.graph.nodes if n.op == "call" and n.target.name == "relu6")
    assert _values(quantized, x)[relu6_node.name].numpy().max() == 6 and model.conv(x).numpy().max() > 6
    reference = model(x).numpy().astype(np.float64)
    assert np.abs(quantized(x).numpy() - reference).max() < 0.05 * np.abs(reference).max()
