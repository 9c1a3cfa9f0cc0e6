"""The ``numba`` engine of the integer kernels: int8 linear and conv2d as compiled loops.

Registered by ``fxkit/backends/__init__.py`` with
`fxkit.runtime.ops.quantized_ops.register_quantized_engine` and chosen with
``set_quantized_engine("numba")``; numba is imported only then. The results are
bit-identical to the reference engine (tests/quantization/test_int8_kernels.py).

Where the time goes: each output row is a set of dot products of int8 rows
widened to int16 and accumulated in int32, which LLVM turns into packed
multiply-adds. The zero points cost nothing per product: with ``K`` products,

    sum((x - x_zp) * (w - w_zp)) = sum(x * w) - w_zp * sum(x) + (K * x_zp * w_zp - x_zp * sum(w))

where the last term (plus the bias) is one constant per output channel, computed
once per call. Requantization (gemmlowp's fixed-point multiply and rounding
shift) runs over the finished row in a branch-free loop that vectorises too.
Rows are spread over threads with ``prange``; convolutions are im2col plus the
same product. There is no packing or cache blocking, and no use of the int8 dot
instructions (AVX-512 VNNI ``vpdpbusd``) that fbgemm is built on, so float32 BLAS
stays ahead on large layers (benchmarks/quantization.py).
"""
import numba
import numpy as np
from numba import prange

_JIT = {"cache": True, "nogil": True}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@numba.njit(inline="always", **_JIT)
def _requantize(acc, multiplier, left, right, output_zero_point, low, high):
    """gemmlowp's ``MultiplyByQuantizedMultiplier`` of one int32 accumulator, then zero point and
    clamp; written with selects, not branches, so the loop over a row vectorises."""
    x = np.int64(acc) << left
    x = min(max(x, _INT32_MIN), _INT32_MAX)
    product = x * multiplier
    product += (1 << 30) if product >= 0 else (1 - (1 << 30))
    top = (product >> 31) if product >= 0 else -((-product) >> 31)  # C division truncates toward zero
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (top < 0)
    out = (top >> right) + ((top & mask) > threshold) + output_zero_point
    return min(max(out, low), high)


@numba.njit(parallel=True, **_JIT)
def _gemm_requantize(x, w, weight_zero_point, constant, multiplier, left, right, output_zero_point, low, high, out):
    """``out[m, n]``: the requantized ``sum_k x[m, k] * w[n, k] - w_zp[n] * sum_k x[m, k] + constant[n]``."""
    m_rows, k = x.shape
    n_cols = w.shape[0]
    for m in prange(m_rows):
        xr = x[m]
        x_sum = np.int64(0)
        for i in range(k):
            x_sum += xr[i]
        acc = np.empty(n_cols, np.int32)
        for n in range(n_cols):
            wr = w[n]
            dot = np.int32(0)
            for i in range(k):
                dot += np.int32(np.int16(xr[i]) * np.int16(wr[i]))
            acc[n] = dot
        for n in range(n_cols):
            # NOTE: wrapped to int32 like the reference's int32 accumulator, so even an overflow agrees.
            total = np.int32(np.int64(acc[n]) - weight_zero_point[n] * x_sum + constant[n])
            out[m, n] = _requantize(total, multiplier[n], left[n], right[n], output_zero_point, low, high)


def _channel_constants(weight2d, bias, input_zero_point, weight_zero_point, multiplier, shift):
    """The per-output-channel int64 vectors of `_gemm_requantize`: the zero-point terms that do not
    depend on the input row, ``K * x_zp * w_zp - x_zp * sum(w) + bias``, and the shifts split in two."""
    k = weight2d.shape[1]
    w_zp = weight_zero_point.astype(np.int64)
    constant = k * input_zero_point * w_zp - input_zero_point * weight2d.sum(axis=1, dtype=np.int64) + bias
    shift = shift.astype(np.int64)
    return w_zp, constant, multiplier.astype(np.int64), np.maximum(shift, 0), np.maximum(-shift, 0)


@numba.njit(parallel=True, **_JIT)
def _im2col(x, pad_value, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, cols):
    """Rows ``(image, oy, ox)``, columns ``(channel, ky, kx)``; taps outside the image read ``pad_value``."""
    n_images, channels, h, w = x.shape
    for n in prange(n_images):
        for oy in range(oh):
            for ox in range(ow):
                row = (n * oh + oy) * ow + ox
                col = 0
                for c in range(channels):
                    for i in range(kh):
                        y = oy * sh - ph + i * dh
                        for j in range(kw):
                            xx = ox * sw - pw + j * dw
                            if 0 <= y < h and 0 <= xx < w:
                                cols[row, col] = x[n, c, y, xx]
                            else:
                                cols[row, col] = pad_value
                            col += 1


def linear(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype):
    """The integer linear layer on 2-D ``x`` (arguments as `quantized_ops.reference_linear`, without ``xp``)."""
    weight = np.ascontiguousarray(weight)
    out = np.empty((x.shape[0], weight.shape[0]), dtype)
    _gemm_requantize(np.ascontiguousarray(x), weight,
                     *_channel_constants(weight, bias, input_zero_point, weight_zero_point, multiplier, shift),
                     output_zero_point, low, high, out)
    return out


def conv2d(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype, stride, padding, dilation, groups):
    """The integer convolution of a batched ``x`` (arguments as `quantized_ops.reference_conv2d`, without
    ``xp``): im2col, then one requantizing product per group into ``(pixels, channels)``, transposed once."""
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((n * oh * ow, c * kh * kw), x.dtype)
    _im2col(np.ascontiguousarray(x), x.dtype.type(input_zero_point), kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, cols)
    w2d = np.ascontiguousarray(weight).reshape(oc, cg * kh * kw)
    out = np.empty((n * oh * ow, oc), dtype)
    per_group, k = oc // groups, cg * kh * kw
    vectors = _channel_constants(w2d, bias, input_zero_point, weight_zero_point, multiplier, shift)
    for g in range(groups):
        channels = slice(g * per_group, (g + 1) * per_group)
        group_cols = cols if groups == 1 else np.ascontiguousarray(cols[:, g * k:(g + 1) * k])
        _gemm_requantize(group_cols, w2d[channels], *(v[channels] for v in vectors), output_zero_point, low, high,
                         out[:, channels])
    return np.ascontiguousarray(out.reshape(n, oh * ow, oc).transpose(0, 2, 1)).reshape(n, oc, oh, ow)


KERNELS = {"linear": linear, "conv2d": conv2d}
