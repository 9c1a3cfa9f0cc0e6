"""numba loops for batch norm's per-channel passes: one pass where numpy makes two to four.

Training ``batch_norm`` ends in ``x * scale + shift`` per channel, a multiply into new memory and an add
in place; its gradient (`fxkit.runtime.autograd.batch_norm_training_backward`) ends in
``centered * a + b + g * scale``, four passes and a temporary. On ResNet-18's activations (batch 8 at
64x64, 20 batch norms a step) those passes are a third of the op. The elementwise loops compute every
element by the same operations in the same order, each rounded in the dtype (numba contracts no
multiply-add), so the result is numpy's bit for bit.

The statistics and the gradient's per-channel sums are the rest of the op: numpy reduced them in
float32 in five passes and two temporaries (209 us for the mean and variance of 8x64x32x32 against
54 us here). These loops accumulate in float64, as PyTorch's CPU kernel does, so they are not numpy's
float32 sums bit for bit: they are closer to the float64 values (the mean's largest error 2.3e-7
against 5.5e-7, the variance's 4.8e-8 against 1.4e-7, relative, on that activation). The numba
backend's batch norm kernels accumulate with the same loop (`planes_moments`).

Imported only where `fxkit.runtime.ops.loop_gate.loops_fit` lets it run (numba takes ~0.5 s to import).
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(**_JIT)
def channel_affine(x, scale, shift, out):
    """``out[n, c, p] = x[n, c, p] * scale[c] + shift[c]``; ``x`` and ``out`` ``(N, C, P)``."""
    n, c, p = x.shape
    for b in range(n):
        for ch in range(c):
            s = scale[ch]
            t = shift[ch]
            for i in range(p):
                out[b, ch, i] = x[b, ch, i] * s + t


_SUMS = dict(_JIT, fastmath={"reassoc"})
"""The reductions' loops: sums may be reassociated (vectorised, several partial sums), nothing else relaxed.
They accumulate in float64, so the order moves the result by float64 roundings, far below the float32 ones."""


_SHORT_PLANE = 64
"""Planes shorter than this (ResNet's 8x8 to 2x2 maps) are reduced across channels, row by row: a channel's plane
of 4 values makes an inner loop too short to vectorise (8x512x2x2: 58 against 12 us for the gradient)."""


@numba.njit(**_SUMS)
def planes_moments(x, mean, var, g, sum_g, sum_gd, backward):
    """Per channel of ``x`` ``(B, C, P)``: its ``mean`` and biased ``var``, and when ``backward`` the sums of ``g``
    (``x``'s shape) and of ``g * (x - mean)`` into ``sum_g`` and ``sum_gd``; all four float64 ``(C,)``, written.

    One pass, accumulated in float64 as PyTorch's CPU batch norm does (its accumulator type for float is
    double): the sums of ``x - shift``, of its square and, backward, of ``g`` and ``g * (x - shift)``, ``shift``
    being the channel's first value, so the variance ``E[d^2] - E[d]^2`` does not cancel beyond a few float64
    roundings (the deviations from the shift are of the order of the spread); ``sum g * (x - mean)`` is
    ``sum g * d - E[d] * sum g``. Two passes (the mean, then the deviations) read the input twice: one pass
    takes a third off batch norm's gradient. Short planes of contiguous memory are summed along whole rows
    ``(C * P)`` into float64 partial sums per element, then per channel. Also the numba backend's kernel for
    NCHW and channel-major memory (`fxkit.backends.numba_batch_norm`)."""
    _planes_moments(x, mean, var, g, sum_g, sum_gd, backward)


@numba.njit(**_SUMS)
def _planes_moments(x, mean, var, g, sum_g, sum_gd, backward):
    """`planes_moments`, what the loops here call (a test counts calls of the public one)."""
    b, c, p = x.shape
    if p < _SHORT_PLANE and x.flags.c_contiguous and (not backward or g.flags.c_contiguous):
        rows_moments(x.reshape(b, c * p), p, mean, var, g.reshape(b, c * p), sum_g, sum_gd, backward)
        return
    for k in range(c):
        shift, s, v, sg, sgd = _channel_sums(x, g, k, backward)
        _finish(k, shift, s, v, sg, sgd, b * p, mean, var, sum_g, sum_gd)


@numba.njit(inline="always", **_SUMS)
def _channel_sums(x, g, k, backward):
    """Channel ``k``'s float64 sums about its first value ``shift``: ``(shift, sum d, sum d^2, sum g, sum g * d)``
    with ``d = x - shift`` (the last two zero unless ``backward``)."""
    b, _, p = x.shape
    shift = np.float64(x[0, k, 0])
    s, v, sg, sgd = 0.0, 0.0, 0.0, 0.0
    for i in range(b):
        for j in range(p):
            d = x[i, k, j] - shift
            s += d
            v += d * d
            if backward:
                sg += g[i, k, j]
                sgd += g[i, k, j] * d
    return shift, s, v, sg, sgd


@numba.njit(inline="always", **_SUMS)
def _finish(k, shift, s, v, sg, sgd, count, mean, var, sum_g, sum_gd):
    """Channel ``k``'s moments and sums from the sums about its ``shift`` (see `planes_moments`)."""
    m = s / count
    mean[k] = shift + m
    var[k] = max(v / count - m * m, 0.0)
    sum_g[k] = sg
    sum_gd[k] = sgd - m * sg


@numba.njit(**_SUMS)
def rows_moments(rows, p, mean, var, g, sum_g, sum_gd, backward):
    """`planes_moments` of ``(B, C * P)`` rows whose planes are ``p`` long: float64 sums per element of a row,
    over the batch, then per channel. With ``p = 1``, the moments of channels-last ``(R, C)`` rows (the numba
    backend's batch norm in channels-last memory)."""
    b, width = rows.shape
    shift = np.empty(width)
    for k in range(width // p):
        shift[k * p:(k + 1) * p] = rows[0, k * p]
    acc, acc_sq, acc_g, acc_gd = np.zeros(width), np.zeros(width), np.zeros(width), np.zeros(width)
    for i in range(b):
        for j in range(width):
            d = rows[i, j] - shift[j]
            acc[j] += d
            acc_sq[j] += d * d
            if backward:
                acc_g[j] += g[i, j]
                acc_gd[j] += g[i, j] * d
    for k in range(width // p):
        part = slice(k * p, (k + 1) * p)
        _finish(k, shift[k * p], acc[part].sum(), acc_sq[part].sum(), acc_g[part].sum(), acc_gd[part].sum(), b * p,
                mean, var, sum_g, sum_gd)


@numba.njit(**_SUMS)
def batch_norm_gradient_into(x, g, weight, eps, out, grad_weight, grad_bias):
    """All of training batch norm's gradient over C-contiguous ``(N, C, P)`` planes: the statistics and the two sums
    (`planes_moments`, float64), the per-channel coefficients from them in float64, rounded once to the dtype, and
    the input gradient ``((x - mean) * a + b) + g * scale`` into ``out`` (`_gradient_rows`); ``grad_weight`` and
    ``grad_bias`` ``(C,)`` written. ``weight`` is ``(C,)`` (ones where batch norm has none).

    One call where the numpy form made about twenty small array operations on ``(C,)`` vectors between two loops."""
    n, c, p = x.shape
    count = n * p
    mean, var, sum_g, sum_gd = np.empty(c), np.empty(c), np.empty(c), np.empty(c)
    _planes_moments(x, mean, var, g, sum_g, sum_gd, True)
    coefficients = np.empty((4, c), out.dtype)  # mean, a, b, scale per channel, rounded to the dtype
    for k in range(c):
        invstd = 1.0 / np.sqrt(var[k] + eps)
        gw = sum_gd[k] * invstd
        scale = invstd * weight[k]
        grad_weight[k] = gw
        grad_bias[k] = sum_g[k]
        coefficients[0, k] = mean[k]
        coefficients[1, k] = -(scale * invstd) * (gw / count)
        coefficients[2, k] = -scale * (sum_g[k] / count)
        coefficients[3, k] = scale
    _gradient_rows(x.reshape(n, c * p), g.reshape(n, c * p), p, coefficients, out.reshape(n, c * p))


@numba.njit(**_JIT)
def _gradient_rows(x, g, p, coefficients, out):
    """``out = ((x - mean) * a + b) + g * scale`` over ``(N, C * P)`` rows, the four coefficients of element ``j``
    those of channel ``j // p``, each operation rounded in the dtype (no reassociation: compiled without fastmath).
    Short planes take the coefficients spread along a row, so the inner loop runs the row's length."""
    n, width = x.shape
    if p < _SHORT_PLANE:
        spread = np.empty((4, width), coefficients.dtype)
        for j in range(width):
            for r in range(4):
                spread[r, j] = coefficients[r, j // p]
        for i in range(n):
            for j in range(width):
                out[i, j] = ((x[i, j] - spread[0, j]) * spread[1, j] + spread[2, j]) + g[i, j] * spread[3, j]
        return
    c = width // p
    # NOTE: planes indexed as such: a j-range over the flat rows does not vectorise (108 against 14 us)
    x, g, out = x.reshape(n, c, p), g.reshape(n, c, p), out.reshape(n, c, p)
    for i in range(n):
        for k in range(c):
            m, u, v, s = coefficients[0, k], coefficients[1, k], coefficients[2, k], coefficients[3, k]
            for j in range(p):
                out[i, k, j] = ((x[i, k, j] - m) * u + v) + g[i, k, j] * s
