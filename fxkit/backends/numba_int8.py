"""The ``numba`` engine of the integer kernels: int8 linear and conv2d as compiled loops.

Registered by ``fxkit/backends/__init__.py`` with
`fxkit.runtime.ops.quantized_ops.register_quantized_engine` and chosen with
``set_quantized_engine("numba")``; numba is imported only then. The results are
bit-identical to the reference engine (tests/quantization/test_int8_kernels.py).

Where the time goes: the inner loop is a dot product of int8 rows widened to
int16, accumulated in int32, which LLVM turns into packed multiply-add
instructions (``vpmaddwd``, or ``vpdpwssd`` with AVX-512 VNNI). The zero points
are applied once per output through row and column sums::

    sum((x - x_zp) * (w - w_zp)) = sum(x * w) - w_zp * sum(x) - x_zp * sum(w) + K * x_zp * w_zp

and requantization (gemmlowp's fixed-point multiply and rounding shift) is
fused into the same loop, so each int32 accumulator is written once, as int8.
Rows are spread over threads with ``prange``. There is no cache blocking:
float32 BLAS (packed panels, register tiles) keeps its lead on large layers.
"""
import numba
import numpy as np
from numba import prange

_JIT = {"cache": True, "nogil": True}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@numba.njit(inline="always", **_JIT)
def _requantize(acc, multiplier, shift, output_zero_point, low, high):
    """gemmlowp's ``MultiplyByQuantizedMultiplier`` of one int32 accumulator, then zero point and clamp."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    x = np.int64(acc) << left
    x = min(max(x, _INT32_MIN), _INT32_MAX)
    product = x * np.int64(multiplier)
    if product >= 0:
        top = (product + (1 << 30)) >> 31
    else:
        top = -((-(product + (1 - (1 << 30)))) >> 31)  # C division truncates toward zero
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (1 if top < 0 else 0)
    out = (top >> right) + (1 if (top & mask) > threshold else 0) + output_zero_point
    return min(max(out, low), high)


@numba.njit(inline="always", **_JIT)
def _dot(xr, wr):
    acc = np.int32(0)
    for k in range(xr.shape[0]):
        acc += np.int32(np.int16(xr[k]) * np.int16(wr[k]))
    return acc


@numba.njit(**_JIT)
def _column_sums(w):
    sums = np.zeros(w.shape[0], np.int64)
    for n in range(w.shape[0]):
        s = np.int64(0)
        for k in range(w.shape[1]):
            s += w[n, k]
        sums[n] = s
    return sums


@numba.njit(inline="always", **_JIT)
def _output(acc, x_sum, n, k, input_zero_point, w_sums, bias, weight_zero_point, multiplier, shift,
            output_zero_point, low, high):
    total = (np.int64(acc) - np.int64(weight_zero_point[n]) * x_sum - input_zero_point * w_sums[n]
             + k * input_zero_point * np.int64(weight_zero_point[n]) + bias[n])
    # NOTE: wrapped to int32 like the reference's int32 accumulator, so even an overflow agrees.
    return _requantize(np.int32(total), multiplier[n], shift[n], output_zero_point, low, high)


@numba.njit(parallel=True, **_JIT)
def _linear_kernel(x, w, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point,
                   low, high, out):
    m_rows, k = x.shape
    w_sums = _column_sums(w)
    for m in prange(m_rows):
        xr = x[m]
        x_sum = np.int64(0)
        for i in range(k):
            x_sum += xr[i]
        for n in range(w.shape[0]):
            out[m, n] = _output(_dot(xr, w[n]), x_sum, n, k, input_zero_point, w_sums, bias, weight_zero_point,
                                multiplier, shift, output_zero_point, low, high)


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


@numba.njit(parallel=True, **_JIT)
def _conv_gemm(cols, w2d, groups, pixels, bias, input_zero_point, weight_zero_point, multiplier, shift,
               output_zero_point, low, high, out):
    """``out[image, oc, pixel]`` from the columns of each group and that group's weight rows."""
    k = w2d.shape[1]
    per_group = w2d.shape[0] // groups
    w_sums = _column_sums(w2d)
    for m in prange(cols.shape[0]):
        image, pixel = m // pixels, m % pixels
        for g in range(groups):
            xr = cols[m, g * k:(g + 1) * k]
            x_sum = np.int64(0)
            for i in range(k):
                x_sum += xr[i]
            for n in range(g * per_group, (g + 1) * per_group):
                out[image, n, pixel] = _output(_dot(xr, w2d[n]), x_sum, n, k, input_zero_point, w_sums, bias,
                                               weight_zero_point, multiplier, shift, output_zero_point, low, high)


def linear(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype):
    """The integer linear layer on 2-D ``x`` (arguments as `quantized_ops.reference_linear`, without ``xp``)."""
    out = np.empty((x.shape[0], weight.shape[0]), dtype)
    _linear_kernel(np.ascontiguousarray(x), np.ascontiguousarray(weight), bias, input_zero_point, weight_zero_point,
                   multiplier, shift, output_zero_point, low, high, out)
    return out


def conv2d(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype, stride, padding, dilation, groups):
    """The integer convolution of a batched ``x`` (arguments as `quantized_ops.reference_conv2d`, without ``xp``)."""
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((n * oh * ow, c * kh * kw), x.dtype)
    _im2col(np.ascontiguousarray(x), x.dtype.type(input_zero_point), kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, cols)
    out = np.empty((n, oc, oh * ow), dtype)
    _conv_gemm(cols, np.ascontiguousarray(weight).reshape(oc, cg * kh * kw), groups, oh * ow, bias,
               input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high, out)
    return out.reshape(n, oc, oh, ow)


KERNELS = {"linear": linear, "conv2d": conv2d}
