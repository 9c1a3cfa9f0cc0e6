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


@numba.njit(**_SUMS)
def planes_moments(x, mean, var, g, sum_g, sum_gd, backward):
    """Per channel of ``x`` ``(B, C, P)``: its ``mean`` and biased ``var``, and when ``backward`` the sums of ``g``
    (``x``'s shape) and of ``g * (x - mean)`` into ``sum_g`` and ``sum_gd``; all four float64 ``(C,)``, written.

    Two passes per channel, accumulated in float64 as PyTorch's CPU batch norm does (its accumulator type for
    float is double): the mean, then the squared deviations from it (no cancellation) and the sums. Also the
    numba backend's kernel for NCHW and channel-major memory (`fxkit.backends.numba_batch_norm`)."""
    b, c, p = x.shape
    count = b * p
    for k in range(c):
        s = 0.0
        for i in range(b):
            for j in range(p):
                s += x[i, k, j]
        m = s / count
        v, sg, sgd = 0.0, 0.0, 0.0
        for i in range(b):
            for j in range(p):
                d = x[i, k, j] - m
                v += d * d
                if backward:
                    sg += g[i, k, j]
                    sgd += g[i, k, j] * d
        mean[k], var[k], sum_g[k], sum_gd[k] = m, v / count, sg, sgd


@numba.njit(**_JIT)
def centered_affine_plus_scaled_into(x, mean, a, b, g, scale, out):
    """``out[n, c, p] = ((x - mean[c]) * a[c] + b[c]) + g * scale[c]``, each operation rounded in the dtype: the
    numpy form's centring, ``centered *= a``, ``centered += b`` and ``centered += g * scale`` in one pass; all
    ``(N, C, P)``."""
    n, c, p = x.shape
    for k in range(n):
        for ch in range(c):
            m = mean[ch]
            u = a[ch]
            v = b[ch]
            s = scale[ch]
            for i in range(p):
                out[k, ch, i] = ((x[k, ch, i] - m) * u + v) + g[k, ch, i] * s
