"""Cases for fxkit/runtime/quantized.py and fxkit/runtime/ops/quantized_ops.py:
quantize_affine, dequantize_affine, quantized_linear, quantized_conv2d.

Quantization follows PyTorch's CPU kernels: ``round_half_even(x * float32(1 / scale)
+ zero_point)`` in float32, clamped; PyTorch itself is the oracle in the torch
cases. The integer kernels are checked against tests/quantization/int_reference.py
(int64 accumulators tap by tap, gemmlowp requantization on Python integers).
"""
import warnings

import numpy as np

import fxkit
from tests.quantization import int_reference as ref
from tests.runtime.opcheck import case, randf, torch_ref

RANGES = {np.int8: (-128, 127), np.uint8: (0, 255)}


def _quantize_ref(x, scale, zero_point, dtype, axis=None):
    np_dtype = dtype.np.type
    qmin, qmax = RANGES[np_dtype]
    x = x.astype(np.float32)
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.float32)
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    inverse = (np.float32(1) / scale).astype(np.float32)
    return np.clip(np.rint(x * inverse + zero_point), qmin, qmax).astype(np_dtype)


def _dequantize_ref(q, scale, zero_point, axis=None):
    scale, zero_point = np.asarray(scale, np.float64), np.asarray(zero_point, np.float64)
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    return (q.astype(np.float64) - zero_point) * scale


def _torch_quantize(x, scale, zero_point, dtype):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch deprecates its quantized tensors
        qdtype = torch.qint8 if dtype is fxkit.int8 else torch.quint8
        return torch.quantize_per_tensor(x.float(), scale, zero_point, qdtype).int_repr()


def _ints(rng, dtype, *shape):
    low, high = RANGES[dtype]
    return rng.integers(low, high + 1, shape).astype(dtype)


def _f32(value):
    return float(np.float32(value))


case("quantize_affine", lambda r: ((randf(r, 4, 5) * 3, _f32(0.02), 3, fxkit.int8), {}), _quantize_ref,
     id="int8", dtype=fxkit.int8)
case("quantize_affine", lambda r: ((randf(r, 3, 6)[:, ::2], _f32(0.01), 130, fxkit.uint8), {}), _quantize_ref,
     id="uint8-noncontiguous", dtype=fxkit.uint8)
case("quantize_affine", lambda r: ((randf(r, 2, 3, 4), randf(r, 3) ** 2 / 10 + 0.01,
                                    r.integers(-5, 5, 3).astype(np.int32), fxkit.int8), {"axis": 1}),
     _quantize_ref, id="per-channel", dtype=fxkit.int8)
case("quantize_affine", lambda r: ((randf(r, 0, 4), _f32(0.1), 0, fxkit.int8), {}), _quantize_ref,
     id="empty", dtype=fxkit.int8)
case("quantize_affine", lambda r: ((randf(r, 6, 7) * 2, _f32(0.013), 7, fxkit.int8), {}),
     torch_ref(_torch_quantize), id="torch-int8", dtype=fxkit.int8)
case("quantize_affine", lambda r: ((randf(r, 6, 7) * 2, _f32(0.009), 140, fxkit.uint8), {}),
     torch_ref(_torch_quantize), id="torch-uint8", dtype=fxkit.uint8)

case("dequantize_affine", lambda r: ((_ints(r, np.int8, 4, 5), _f32(0.05), -3), {}), _dequantize_ref,
     id="int8", dtype=fxkit.float32)
case("dequantize_affine", lambda r: ((_ints(r, np.uint8, 3, 4).T, _f32(0.2), 128), {}), _dequantize_ref,
     id="uint8-noncontiguous", dtype=fxkit.float32)
case("dequantize_affine", lambda r: ((_ints(r, np.int8, 3, 4), (randf(r, 3) ** 2 + 0.1).astype(np.float32),
                                      r.integers(-4, 4, 3).astype(np.int32)), {"axis": 0}),
     _dequantize_ref, id="per-channel", dtype=fxkit.float32)


def _linear_ref(x, w, bias, x_zp, w_zp, multiplier, shift, out_zp, dtype=fxkit.int8, relu=False):
    n = w.shape[0]
    w_zp, multiplier, shift = (np.broadcast_to(np.asarray(v), (n,)) for v in (w_zp, multiplier, shift))
    x2 = x.reshape(-1, x.shape[-1])
    acc = ref.linear_accumulators(x2, w, bias, x_zp, w_zp)
    qmin, qmax = RANGES[dtype.np.type]
    out = ref.requantize(acc, multiplier, shift, out_zp, qmin, qmax, relu, channel_axis=1)
    return out.reshape(*x.shape[:-1], n).astype(dtype.np)


def _linear_make(x_dtype, batch, per_channel, with_bias=True, out_dtype=fxkit.int8, relu=False):
    def make(r):
        n, k = 6, 9
        x = _ints(r, x_dtype, *batch, k)
        w = _ints(r, np.int8, n, k)
        bias = r.integers(-3000, 3000, n).astype(np.int32) if with_bias else None
        reals = r.uniform(2e-4, 4e-3, n if per_channel else 1)
        multiplier, shift = (a.astype(np.int32) for a in ref.multipliers_for(reals))
        if not per_channel:
            multiplier, shift = int(multiplier[0]), int(shift[0])
        w_zp = r.integers(-3, 3, n).astype(np.int32) if per_channel else 0
        x_zp = int(r.integers(*RANGES[x_dtype]) // 2)
        out_zp = int(np.mean(RANGES[out_dtype.np.type]))
        return (x, w, bias, x_zp, w_zp, multiplier, shift, out_zp), {"dtype": out_dtype, "relu": relu}
    return make


case("quantized_linear", _linear_make(np.int8, (5,), False), _linear_ref, id="per-tensor", dtype=fxkit.int8)
case("quantized_linear", _linear_make(np.uint8, (2, 3), True, relu=True), _linear_ref,
     id="per-channel-3d-relu", dtype=fxkit.int8)
case("quantized_linear", _linear_make(np.int8, (4,), True, with_bias=False, out_dtype=fxkit.uint8), _linear_ref,
     id="no-bias-uint8-out", dtype=fxkit.uint8)
case("quantized_linear", _linear_make(np.int8, (0,), False), _linear_ref, id="empty-batch", dtype=fxkit.int8)


def _conv_ref(x, w, bias, x_zp, w_zp, multiplier, shift, out_zp, stride=1, padding=0, dilation=1, groups=1,
              dtype=fxkit.int8, relu=False):
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    n = w.shape[0]
    w_zp, multiplier, shift = (np.broadcast_to(np.asarray(v), (n,)) for v in (w_zp, multiplier, shift))
    unbatched = x.ndim == 3
    acc = ref.conv2d_accumulators(x[None] if unbatched else x, w, bias, x_zp, w_zp, pair(stride), pair(padding),
                                  pair(dilation), groups)
    qmin, qmax = RANGES[dtype.np.type]
    out = ref.requantize(acc, multiplier, shift, out_zp, qmin, qmax, relu, channel_axis=1).astype(dtype.np)
    return out[0] if unbatched else out


def _conv_make(x_dtype, x_shape, w_shape, per_channel, **conv):
    def make(r):
        oc = w_shape[0]
        x = _ints(r, x_dtype, *x_shape)
        w = _ints(r, np.int8, *w_shape)
        bias = r.integers(-3000, 3000, oc).astype(np.int32)
        reals = r.uniform(2e-4, 3e-3, oc if per_channel else 1)
        multiplier, shift = (a.astype(np.int32) for a in ref.multipliers_for(reals))
        if not per_channel:
            multiplier, shift = int(multiplier[0]), int(shift[0])
        w_zp = r.integers(-2, 2, oc).astype(np.int32) if per_channel else 0
        x_zp = int(r.integers(*RANGES[x_dtype]) // 2)
        return (x, w, bias, x_zp, w_zp, multiplier, shift, -5), conv
    return make


case("quantized_conv2d", _conv_make(np.int8, (2, 3, 7, 6), (4, 3, 3, 3), False, padding=1), _conv_ref,
     id="per-tensor-padded", dtype=fxkit.int8)
case("quantized_conv2d", _conv_make(np.uint8, (2, 4, 9, 8), (6, 2, 3, 2), True, stride=(2, 1), padding=(1, 2),
                                    dilation=(1, 2), groups=2, relu=True),
     _conv_ref, id="per-channel-strided-grouped-relu", dtype=fxkit.int8)
case("quantized_conv2d", _conv_make(np.int8, (3, 5, 5), (2, 3, 2, 2), False), _conv_ref, id="unbatched",
     dtype=fxkit.int8)
