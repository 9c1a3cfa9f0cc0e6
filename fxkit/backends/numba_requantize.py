"""The output pass of the numba int8 engine's products: int32 sums to requantized integers or floats.

`requantize` is gemmlowp's fixed-point step that both product paths end in.
`write_outputs` is the int16 path's pass (`fxkit.backends.numba_int8`): its tiles
leave a block of int32 sums, channel by channel, for one chunk of rows, and it
adds the bias, requantizes (or dequantizes) and stores each value where the
layer's output keeps it, so no layer transposes or requantizes its result in a
second pass. The byte path (`fxkit.backends.numba_int8_vnni`) keeps its sums row
by row and has its own pass over them.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@numba.njit(inline="always", **_JIT)
def requantize(acc, multiplier, left, right, output_zero_point, low, high):
    """gemmlowp's ``MultiplyByQuantizedMultiplier`` of one int32 accumulator, then zero point and
    clamp; written with selects, not branches, so the loop over a channel vectorises."""
    x = np.int64(acc) << left
    x = min(max(x, _INT32_MIN), _INT32_MAX)
    product = x * multiplier
    product += (1 << 30) if product >= 0 else (1 - (1 << 30))
    top = (product >> 31) if product >= 0 else -((-product) >> 31)  # C division truncates toward zero
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (top < 0)
    out = (top >> right) + ((top & mask) > threshold) + output_zero_point
    return min(max(out, low), high)


@numba.njit(inline="always", **_JIT)
def write_outputs(acc, m0, count, n0, n1, n_out, bias, multiplier, left, right, factor, dequantize,
                  output_zero_point, low, high, pixels, out):
    """Store the results of the int32 sums ``acc[c - n0, r]`` (channels ``n0 .. n1``, rows
    ``m0 .. m0 + count``) into the flat ``out``: row ``m`` and channel ``c`` go to
    ``(m // pixels, c, m % pixels)`` of an ``(images, n_out, pixels)`` array (pixels 1: ``(m, c)``).
    Requantized integers, or with ``dequantize`` (a float32 ``out``) ``(acc + bias) * factor``
    (float64, then float32). Channels from ``n_out`` on are padding and are dropped.

    The sum plus bias wraps to int32 first, as the reference engine's accumulator does."""
    offsets = np.empty(count, np.int64)
    for r in range(count):
        m = m0 + r
        offsets[r] = (m // pixels) * n_out * pixels + m % pixels
    # NOTE: requantized into a contiguous row first: that loop vectorises, the scattered store would not.
    requantized = np.empty(count, np.int64)
    dequantized = np.empty(count if dequantize else 0, np.float64)
    for c in range(n0, min(n1, n_out)):
        sums = acc[c - n0]
        b, mult, lft, rgt, f = bias[c], multiplier[c], left[c], right[c], factor[c]
        at = c * pixels
        if dequantize:
            for r in range(count):
                total = np.int32(np.int64(sums[r]) + b)
                dequantized[r] = min(max(np.float64(total) * f, low), high)
            for r in range(count):
                out[offsets[r] + at] = np.float32(dequantized[r])
        else:
            for r in range(count):
                total = np.int32(np.int64(sums[r]) + b)
                requantized[r] = requantize(total, mult, lft, rgt, output_zero_point, low, high)
            for r in range(count):
                out[offsets[r] + at] = requantized[r]
