"""`correct_bias`: the shift it removes is the quantized layer's mean output error, computed
here in float64 numpy from the float weights and inputs; the converted model's mean error
shrinks; a layer without a bias gets one; a QAT model is refused."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import GraphError
from fxkit.runtime import dtypes
from fxkit.transforms.quantize import (MinMaxObserver, PerChannelMinMaxObserver, QConfig, calibrate, convert,
                                       correct_bias, per_channel_qat_qconfig, prepare, prepare_qat)

# 4-bit weights: shifts large enough to measure well above float32 rounding
COARSE = QConfig(activation=MinMaxObserver.with_args(dtype=dtypes.int8, qscheme="per_tensor_affine"),
                 weight=PerChannelMinMaxObserver.with_args(dtype=dtypes.int8, qscheme="per_channel_symmetric",
                                                           quant_min=-7, quant_max=7))


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _qdq(x, scale, zero_point, qmin, qmax):
    return (np.clip(np.rint(x / scale + zero_point), qmin, qmax) - zero_point) * scale


def _setup(rng):
    fxkit.manual_seed(5)
    model = TwoLayers().eval()
    data = [fxkit.from_numpy((rng.standard_normal((32, 8)) + 0.5).astype(np.float32)) for _ in range(4)]
    prepared = prepare(model, COARSE)
    calibrate(prepared, data, progress=False)
    return model, data, prepared


def test_the_first_layers_shift_is_its_mean_quantization_error(rng):
    model, data, prepared = _setup(rng)
    x = np.concatenate([d.numpy() for d in data]).astype(np.float64)
    scale, zero_point = prepared.get_submodule("activation_post_process_0").calculate_qparams()
    w = model.fc1.weight.numpy().astype(np.float64)
    w_scale = np.abs(w).max(axis=1, keepdims=True) / 7
    shift = (_qdq(x, scale, zero_point, -128, 127) @ _qdq(w, w_scale, 0, -7, 7).T - x @ w.T).mean(axis=0)
    bias = model.fc1.bias.numpy().astype(np.float64)
    assert np.abs(shift).max() > 1e-3  # a shift worth correcting
    correct_bias(prepared, data)
    np.testing.assert_allclose(prepared.get_submodule("fc1").bias.numpy(), bias - shift, atol=2e-5)
    assert model.fc1.bias.numpy() == pytest.approx(bias)  # prepare copied the model: the original keeps its bias


def test_corrected_model_has_a_smaller_mean_error_and_a_new_bias(rng):
    model, data, prepared = _setup(rng)
    before = convert(prepared, report=False)
    correct_bias(prepared, data)
    assert prepared.get_submodule("fc2").bias is not None
    after = convert(prepared, report=False)
    expected = np.concatenate([model(x).numpy() for x in data]).astype(np.float64)

    def mean_error(quantized):
        return np.abs((np.concatenate([quantized(x).numpy() for x in data]) - expected).mean(axis=0)).max()

    assert mean_error(after) < 0.5 * mean_error(before)


def test_a_qat_model_is_refused(rng):
    qat = prepare_qat(TwoLayers(), per_channel_qat_qconfig)
    qat(fxkit.from_numpy(rng.standard_normal((4, 8)).astype(np.float32)))
    with pytest.raises(GraphError, match="quantization-aware training.*use prepare"):
        correct_bias(qat, [fxkit.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))])
