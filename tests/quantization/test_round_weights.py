"""`round_weights` (GPTQ): the rounded weights lie on the observer's grid and `convert` stores
exactly those integers; each layer's output error on the calibration inputs (float convolution
and matrix products of the original and rounded weights) is smaller than rounding to nearest."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import GraphError
from fxkit.nn import functional as F
from fxkit.transforms.quantize import (calibrate, convert, per_channel_qat_qconfig, per_channel_qconfig, prepare,
                                       prepare_qat)
from fxkit.transforms.quantize.round_weights import round_weights


class GroupedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1, stride=2, groups=2)
        self.fc = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(self.conv(x).relu().flatten(1))


def _nearest(w, scale):
    return np.clip(np.rint(w / scale), -128, 127) * scale


def test_rounded_weights_move_each_layers_output_less_than_nearest_rounding(rng):
    fxkit.manual_seed(6)
    model = GroupedNet().eval()
    # correlated input channels: where GPTQ's error spreading pays
    base = rng.standard_normal((4, 1, 8, 8))
    data = [fxkit.from_numpy((base[i] + 0.3 * rng.standard_normal((16, 4, 8, 8))).astype(np.float32))
            for i in range(4)]
    prepared = prepare(model, per_channel_qconfig)
    calibrate(prepared, data, progress=False)
    round_weights(prepared, data)
    for name in ("conv", "fc"):
        original = getattr(model, name).weight.numpy().astype(np.float64)
        rounded = prepared.get_submodule(name).weight.numpy().astype(np.float64)
        scale = np.abs(original.reshape(len(original), -1)).max(axis=1) / 127.5  # torch.ao: (qmax - qmin) / 2
        scale = scale.reshape((-1,) + (1,) * (original.ndim - 1))
        steps = rounded / scale
        assert np.abs(steps - np.rint(steps)).max() < 1e-3 and -128.001 <= steps.min() and steps.max() <= 127.001
        nearest = _nearest(original, scale)
        assert np.any(np.rint(steps) != np.rint(nearest / scale))  # GPTQ rounded some values the other way
        if name == "conv":
            inputs = [x for x in data]

            def out(w):
                weight = fxkit.from_numpy(w.astype(np.float32))
                return np.concatenate([F.conv2d(x, weight, None, 2, 1, 1, 2).numpy() for x in inputs])
        else:
            inputs = np.concatenate([model.conv(x).relu().flatten(1).numpy() for x in data]).astype(np.float64)

            def out(w):
                return inputs @ w.T
        error = np.square(out(rounded) - out(original)).sum()
        assert error < 0.9 * np.square(out(nearest) - out(original)).sum(), name
    quantized = convert(prepared, report=False)
    stored = quantized.get_buffer("conv_weight_int8").numpy()
    conv_scale = np.abs(model.conv.weight.numpy().reshape(6, -1)).max(axis=1).reshape(-1, 1, 1, 1) / 127.5
    np.testing.assert_array_equal(stored, np.rint(prepared.get_submodule("conv").weight.numpy() / conv_scale))


def test_a_qat_model_is_refused(rng):
    qat = prepare_qat(GroupedNet(), per_channel_qat_qconfig)
    x = fxkit.from_numpy(rng.standard_normal((2, 4, 8, 8)).astype(np.float32))
    qat(x)
    with pytest.raises(GraphError, match="quantization-aware training.*use prepare"):
        round_weights(qat, [x])
