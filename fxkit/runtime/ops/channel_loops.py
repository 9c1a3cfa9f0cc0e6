"""numba loops for batch norm's per-channel affine passes: one pass where numpy makes two to four.

Training ``batch_norm`` ends in ``x * scale + shift`` per channel, a multiply into new memory and an add
in place; its gradient (`fxkit.runtime.autograd.batch_norm_training_backward`) ends in
``centered * a + b + g * scale``, four passes and a temporary. On ResNet-18's activations (batch 8 at
64x64, 20 batch norms a step) those passes are a third of the op. Each loop computes every element by
the same operations in the same order, each rounded in the dtype (numba contracts no multiply-add), so
the result is numpy's bit for bit.

Imported only where `fxkit.runtime.ops.loop_gate.loops_fit` lets it run (numba takes ~0.5 s to import).
"""
import numba

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


@numba.njit(**_JIT)
def centered_affine_plus_scaled(centered, a, b, g, scale):
    """``centered[n, c, p] = (centered * a[c] + b[c]) + g * scale[c]``, in place; all ``(N, C, P)``."""
    n, c, p = centered.shape
    for k in range(n):
        for ch in range(c):
            u = a[ch]
            v = b[ch]
            s = scale[ch]
            for i in range(p):
                centered[k, ch, i] = (centered[k, ch, i] * u + v) + g[k, ch, i] * s
