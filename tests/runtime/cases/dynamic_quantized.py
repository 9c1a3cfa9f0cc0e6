"""Cases for fxkit/runtime/ops/dynamic_quantized.py: quantized_dynamic_linear.

The reference is written from ONNX's DynamicQuantizeLinear and MatMulInteger
specifications, in float64 and int64 (scale = (max(x, 0) - min(x, 0)) / 255,
zero point and values rounded half to even, integer products summed exactly),
then scaled back by ``x_scale * w_scale`` plus the bias.
"""
import numpy as np

import fxkit
from tests.runtime.opcheck import case


def _reference(x, w, w_scale, bias=None):
    flat = x.reshape(-1, x.shape[-1]).astype(np.float32)
    low, high = min(float(flat.min()), 0.0), max(float(flat.max()), 0.0)
    scale = np.float32((np.float32(high) - np.float32(low)) / np.float32(255)) or np.float32(1)
    zero_point = int(np.clip(np.rint(np.float32(-low) / scale), 0, 255))
    q = np.clip(np.rint(flat / scale) + zero_point, 0, 255).astype(np.int64) - zero_point
    acc = q @ w.astype(np.int64).T
    out = acc.astype(np.float64) * (float(scale) * w_scale.astype(np.float64))
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], w.shape[0]).astype(x.dtype)


def _make(batch, per_channel, with_bias=True, dtype=np.float32):
    def make(r):
        n, k = 6, 11
        x = (r.standard_normal((*batch, k)) * 2 + 0.5).astype(dtype)
        w = r.integers(-127, 128, (n, k)).astype(np.int8)
        w_scale = r.uniform(1e-3, 1e-2, n if per_channel else ()).astype(np.float32)
        bias = r.standard_normal(n).astype(dtype) if with_bias else None
        return (x, w, w_scale, bias), {}
    return make


case("quantized_dynamic_linear", _make((5,), True), _reference, id="per-channel", rtol=1e-5, atol=1e-5)
case("quantized_dynamic_linear", _make((2, 3), False), _reference, id="per-tensor-3d", rtol=1e-5, atol=1e-5)
case("quantized_dynamic_linear", _make((4,), True, with_bias=False), _reference, id="no-bias", rtol=1e-5,
     atol=1e-5)
case("quantized_dynamic_linear", _make((3,), True, dtype=np.float64), _reference, id="float64", rtol=1e-5,
     atol=1e-5, dtype=fxkit.float64)
