"""Quantized tensors: `fxkit.quantize_per_tensor` / `quantize_per_channel` against PyTorch's,
the rounding and clamping rules written out, the accessors and the errors."""
import warnings

import numpy as np
import pytest

import fxkit
from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch deprecates its quantized tensors
        yield torch


@pytest.mark.parametrize("dtype, zero_point", [(fxkit.int8, -7), (fxkit.int8, 0), (fxkit.uint8, 131)])
def test_per_tensor_matches_torch(torch, rng, dtype, zero_point):
    x = (rng.standard_normal((64, 33)) * 3).astype(np.float32)
    scale = float(np.float32(0.0173))
    q = fxkit.quantize_per_tensor(fxkit.from_numpy(x), scale, zero_point, dtype)
    expected = torch.quantize_per_tensor(torch.from_numpy(x), scale, zero_point,
                                         torch.qint8 if dtype is fxkit.int8 else torch.quint8)
    assert q.int_repr().dtype is dtype
    np.testing.assert_array_equal(q.int_repr().numpy(), expected.int_repr().numpy())
    np.testing.assert_array_equal(q.dequantize().numpy(), expected.dequantize().numpy())
    assert (q.q_scale(), q.q_zero_point(), q.qscheme()) == (scale, zero_point, "per_tensor_affine")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_channel_matches_torch(torch, rng, axis):
    x = (rng.standard_normal((6, 5, 4)) * 2).astype(np.float32)
    channels = x.shape[axis]
    scales = rng.uniform(0.01, 0.05, channels).astype(np.float32)
    zero_points = rng.integers(-10, 10, channels)
    q = fxkit.quantize_per_channel(fxkit.from_numpy(x), fxkit.from_numpy(scales), zero_points, axis, fxkit.int8)
    expected = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(scales.astype(np.float64)),
                                          torch.from_numpy(zero_points), axis % 3, torch.qint8)
    np.testing.assert_array_equal(q.int_repr().numpy(), expected.int_repr().numpy())
    np.testing.assert_array_equal(q.dequantize().numpy(), expected.dequantize().numpy())
    np.testing.assert_array_equal(q.q_per_channel_scales().numpy(), scales.astype(np.float64))
    np.testing.assert_array_equal(q.q_per_channel_zero_points().numpy(), zero_points)
    assert q.q_per_channel_axis() == axis % 3
    assert q.q_per_channel_scales().dtype is fxkit.float64
    assert q.q_per_channel_zero_points().dtype is fxkit.int64


def test_rounds_half_to_even_and_clamps():
    x = fxkit.tensor([0.25, 0.75, -0.25, -0.75, 1.25, 100.0, -100.0])
    q = fxkit.quantize_per_tensor(x, 0.5, 0, fxkit.int8)  # x / scale = 0.5, 1.5, -0.5, -1.5, 2.5, 200, -200
    assert q.int_repr().tolist() == [0, 2, 0, -2, 2, 127, -128]
    u = fxkit.quantize_per_tensor(x, 0.5, 10, fxkit.uint8)
    assert u.int_repr().tolist() == [10, 12, 10, 8, 12, 210, 0]


def test_zero_point_is_added_before_rounding_as_pytorch_does():
    # x / scale = -4.4999967 in float32: adding 139 first lands on the tie 134.5, which rounds to 134
    # (PyTorch's x86 kernels); rounding first would give -4 + 139 = 135.
    q = fxkit.quantize_per_tensor(fxkit.tensor([-0.3193016]), 0.07095596194267273, 139, fxkit.uint8)
    assert q.int_repr().tolist() == [134]


def test_dequantize_inverts_quantize_within_half_a_step(rng):
    x = fxkit.from_numpy((rng.random(1000) * 4 - 2).astype(np.float32))
    q = fxkit.quantize_per_tensor(x, 0.02, 3, fxkit.int8)
    error = np.abs(q.dequantize().numpy() - x.numpy())
    assert error.max() <= 0.01 + 1e-7


def test_int_repr_is_a_copy():
    q = fxkit.quantize_per_tensor(fxkit.tensor([1.0, 2.0]), 0.1, 0, fxkit.int8)
    q.int_repr()._data[0] = 0
    assert q.int_repr().tolist() == [10, 20]


def test_repr_shows_the_values_and_parameters():
    q = fxkit.quantize_per_tensor(fxkit.tensor([-1.0, 0.25]), 0.25, 2, fxkit.int8)
    assert repr(q) == ("QTensor(tensor([-1.0000, 0.2500]), dtype=fxkit.int8, "
                       "quantization_scheme=per_tensor_affine, scale=0.25, zero_point=2)")


def test_errors_say_what_and_how():
    x = fxkit.tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match=r"quantize_per_tensor: dtype fxkit.int16 is not supported for quantized "
                                         r"values; use fxkit.int8 or fxkit.uint8"):
        fxkit.quantize_per_tensor(x, 0.1, 0, fxkit.int16)
    with pytest.raises(DTypeError, match="quantize_per_tensor: expected a floating-point tensor, got int64"):
        fxkit.quantize_per_tensor(fxkit.tensor([1, 2]), 0.1, 0, fxkit.int8)
    with pytest.raises(ShapeError, match="quantize_per_tensor: scale must be a positive finite number, got 0.0"):
        fxkit.quantize_per_tensor(x, 0.0, 0, fxkit.int8)
    with pytest.raises(ShapeError, match=r"zero_point 200 is outside the range of int8 \[-128, 127\]"):
        fxkit.quantize_per_tensor(x, 0.1, 200, fxkit.int8)
    with pytest.raises(ShapeError, match=r"quantize_per_channel: expected 3 scales \(the size of dimension 0 of "
                                         r"the input of shape \[3, 2\]\), got 2"):
        fxkit.quantize_per_channel(fxkit.ones(3, 2), [0.1, 0.2], [0, 0, 0], 0, fxkit.int8)
    with pytest.raises(IndexOutOfRangeError, match="quantize_per_channel: dimension out of range"):
        fxkit.quantize_per_channel(fxkit.ones(3, 2), [0.1, 0.2, 0.3], [0, 0, 0], 2, fxkit.int8)
    q = fxkit.quantize_per_channel(fxkit.ones(3, 2), [0.1, 0.2, 0.3], [0, 0, 0], 0, fxkit.int8)
    with pytest.raises(DTypeError, match=r"q_scale\(\): the tensor is quantized per_channel_affine, not "
                                         r"per_tensor_affine; use q_per_channel_scales\(\) instead"):
        q.q_scale()


def test_graph_ops_refuse_wrong_dtypes():
    with pytest.raises(DTypeError, match="quantize_affine: expected a floating-point input, got int64"):
        fxkit.quantize_affine(fxkit.tensor([1, 2]), 0.1, 0, fxkit.int8)
    with pytest.raises(DTypeError, match=r"dequantize_affine: expected an int8 or uint8 input \(quantized values\), "
                                         r"got float32"):
        fxkit.dequantize_affine(fxkit.tensor([1.0]), 0.1, 0)
