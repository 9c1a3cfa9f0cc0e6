"""Post-training quantization of the digits models keeps accuracy within 1 point of float32,
and the saved int8 model is at most 0.3x the size of the saved float32 one.

Models: an MLP whose weights come from scikit-learn's MLPClassifier, and the LeNet-style
DigitsNet trained with fxkit autograd (tests/quantization/conftest.py). Accuracy is on the
held-out last quarter of scikit-learn's digits.
"""
import os

import numpy as np
import pytest

import fxkit
import fxkit.backends  # noqa: F401  (registers the numba integer engine)
from fxkit.runtime.ops.quantized_ops import use_quantized_engine
from fxkit.transforms.quantize import (HistogramObserver, QConfig, calibrate, convert, default_qconfig, prepare,
                                       per_channel_qconfig)

histogram_qconfig = QConfig(activation=HistogramObserver.with_args(dtype=fxkit.int8, method="mse"),
                            weight=per_channel_qconfig.weight)
QCONFIGS = [pytest.param(default_qconfig, id="per-tensor"), pytest.param(per_channel_qconfig, id="per-channel"),
            pytest.param(histogram_qconfig, id="histogram-mse")]
IMAGE = (-1, 1, 8, 8)


def _quantize(model, qconfig, batches):
    prepared = prepare(model, qconfig)
    calibrate(prepared, batches, progress=False)
    return convert(prepared, report=False)


def _int8_weights(gm):
    """The int8 weights the integer kernels of ``gm`` read."""
    kernels = [n for n in gm.graph.nodes if n.is_op("quantized_linear") or n.is_op("quantized_conv2d")]
    return [getattr(gm, n.args[1].target) for n in kernels if getattr(gm, n.args[1].target).dtype is fxkit.int8]


@pytest.mark.slow
@pytest.mark.parametrize("qconfig", QCONFIGS)
def test_sklearn_mlp_ptq_is_within_one_point(digits, sklearn_mlp, qconfig):
    fp32 = digits.accuracy(sklearn_mlp)
    assert fp32 > 90
    quantized = _quantize(sklearn_mlp, qconfig, digits.batches())
    assert len(_int8_weights(quantized)) == 2
    assert not any(isinstance(m, fxkit.nn.Linear) for m in quantized.modules())
    int8 = digits.accuracy(quantized)
    assert abs(int8 - fp32) <= 1.0, f"fp32 {fp32:.2f}% vs int8 {int8:.2f}%"


@pytest.mark.slow
@pytest.mark.parametrize("qconfig", QCONFIGS)
def test_digits_net_ptq_is_within_one_point(digits, digits_net, qconfig):
    fp32 = digits.accuracy(digits_net, IMAGE)
    assert fp32 > 90
    quantized = _quantize(digits_net, qconfig, digits.batches(shape=IMAGE))
    assert len(_int8_weights(quantized)) == 4
    int8 = digits.accuracy(quantized, IMAGE)
    assert abs(int8 - fp32) <= 1.0, f"fp32 {fp32:.2f}% vs int8 {int8:.2f}%"
    with use_quantized_engine("numba"):
        same = digits.accuracy(quantized, IMAGE)
    assert same == int8


@pytest.mark.slow
@pytest.mark.parametrize("model_fixture, shape", [("sklearn_mlp", (-1, 64)), ("digits_net", IMAGE)])
@pytest.mark.parametrize("qconfig", QCONFIGS[:2])
def test_saved_int8_model_is_under_three_tenths_of_float(request, digits, tmp_path, model_fixture, shape, qconfig):
    model = request.getfixturevalue(model_fixture)
    quantized = _quantize(model, qconfig, digits.batches(shape=shape))
    float_path, int8_path = tmp_path / "float32.zip", tmp_path / "int8.zip"
    fxkit.save(fxkit.symbolic_trace(model), float_path)
    fxkit.save(quantized, int8_path)
    ratio = os.path.getsize(int8_path) / os.path.getsize(float_path)
    assert ratio <= 0.3, f"int8 file is {ratio:.3f}x the float32 file"
    reloaded = fxkit.load(int8_path)
    x = fxkit.from_numpy(digits.test_x.reshape(shape))
    np.testing.assert_array_equal(reloaded(x).numpy(), quantized(x).numpy())
