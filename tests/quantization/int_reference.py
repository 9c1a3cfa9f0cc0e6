"""An independent computation of the int8 kernels, written from gemmlowp's definitions.

Accumulations are numpy int64 sums of (x - x_zp) * (w - w_zp) built tap by tap;
requantization runs per element on Python integers (unbounded, so nothing here
can overflow silently), with C's truncating division spelled out. Nothing is
shared with fxkit's implementation.
"""
import math

import numpy as np

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def quantize_multiplier(real):
    """gemmlowp's QuantizeMultiplier of one positive real: ``(multiplier, shift)``."""
    mantissa, exponent = math.frexp(real)
    q = math.floor(mantissa * 2 ** 31 + 0.5)
    if q == 2 ** 31:
        q //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return q, exponent


def _truncating_div(a, b):
    quotient = abs(a) // b
    return quotient if a >= 0 else -quotient


def saturating_rounding_doubling_high_mul(a, b):
    if a == b == INT32_MIN:
        return INT32_MAX
    product = a * b
    nudge = 2 ** 30 if product >= 0 else 1 - 2 ** 30
    return _truncating_div(product + nudge, 2 ** 31)


def rounding_divide_by_pot(x, exponent):
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def requantize_one(acc, multiplier, shift):
    left, right = max(shift, 0), max(-shift, 0)
    x = min(max(acc * 2 ** left, INT32_MIN), INT32_MAX)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), right)


def requantize(acc, multipliers, shifts, output_zero_point, qmin, qmax, relu, channel_axis):
    """Each int64 accumulator of ``acc`` requantized with its channel's multiplier and shift."""
    assert acc.size == 0 or (acc.min() >= INT32_MIN and acc.max() <= INT32_MAX), "accumulators must fit int32"
    low = max(qmin, output_zero_point) if relu else qmin
    out = np.empty(acc.shape, np.int64)
    for index in np.ndindex(acc.shape):
        c = index[channel_axis]
        value = output_zero_point + requantize_one(int(acc[index]), int(multipliers[c]), int(shifts[c]))
        out[index] = min(max(value, low), qmax)
    return out


def linear_accumulators(x, w, bias, x_zp, w_zp):
    """int64 ``sum_k (x[i, k] - x_zp) * (w[j, k] - w_zp[j]) + bias[j]``, one product at a time."""
    xc = x.astype(np.int64) - x_zp
    wc = w.astype(np.int64) - np.asarray(w_zp, np.int64)[:, None]
    acc = np.zeros((x.shape[0], w.shape[0]), np.int64)
    for k in range(x.shape[1]):
        acc += xc[:, k:k + 1] * wc[None, :, k]
    return acc + (0 if bias is None else bias.astype(np.int64))


def conv2d_accumulators(x, w, bias, x_zp, w_zp, stride, padding, dilation, groups):
    """int64 convolution sums over kernel taps; the input is padded with its zero point."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xc = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=x_zp) - x_zp
    wc = w.astype(np.int64) - np.asarray(w_zp, np.int64)[:, None, None, None]
    n, _, h, wd = xc.shape
    oc, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    acc = np.zeros((n, oc, oh, ow), np.int64)
    per_group = oc // groups
    for o in range(oc):
        g = o // per_group
        for c in range(cg):
            for i in range(kh):
                for j in range(kw):
                    tap = xc[:, g * cg + c, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
                    acc[:, o] += tap * wc[o, c, i, j]
    if bias is not None:
        acc += bias.astype(np.int64)[None, :, None, None]
    return acc


def multipliers_for(reals):
    """Per-channel ``(multipliers, shifts)`` int arrays from reals, by `quantize_multiplier`."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)
