"""numba kernels for the convolutions BLAS serves badly: depthwise (one filter per channel).

A depthwise conv2d (``groups == in_channels``: MobileNet, EfficientNet) is,
through im2col, ``N * C`` matrix products of a ``1 x kH*kW`` row by a
``kH*kW x OH*OW`` block: BLAS gets no reuse from such shapes and the columns
are ``kH*kW`` times the input. Here each output plane is accumulated directly
from its input plane, one kernel tap at a time: for each tap, a contiguous run
of output pixels receives ``weight * input`` shifted by the tap's offset, a loop
LLVM vectorises when the stride along the width is one. The run's ends are
computed from the padding instead of tested per pixel, so there are no
branches in the inner loop and no padded copy of the input. Planes are spread
over numba's threads when there is enough work (`PARALLEL_MIN_WORK`).

Imported by `fxkit.backends.conv_lowering` only when a numba specialisation
picks this kernel: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(**_JIT)
def _plane(out, x, w, plane, sh, sw, ph, pw, dh, dw):
    """Output plane ``plane`` (``n * OC + o``) of `depthwise_conv2d`."""
    c, h, wd = x.shape[1], x.shape[2], x.shape[3]
    oc, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    i = plane // oc
    o = plane - i * oc
    src = x[i, o // (oc // c)]
    dst = out[i, o]
    for y in range(oh):
        row = dst[y]
        row[:] = 0
        for p in range(kh):
            iy = y * sh - ph + p * dh
            if iy < 0 or iy >= h:
                continue
            line = src[iy]
            for q in range(kw):
                tap = w[o, 0, p, q]
                offset = q * dw - pw
                # Output columns whose input column xo * sw + offset lies in [0, W).
                lo = 0 if offset >= 0 else (sw - 1 - offset) // sw
                hi = min((wd - 1 - offset) // sw + 1, ow) if wd - 1 - offset >= 0 else 0
                if hi <= lo:
                    continue
                # NOTE: slices indexed from 0 (no negative index to wrap): the loop vectorises.
                target = row[lo:hi]
                start = lo * sw + offset
                if sw == 1:
                    source = line[start:start + hi - lo]
                    for k in range(hi - lo):
                        target[k] += tap * source[k]
                else:
                    for k in range(hi - lo):
                        target[k] += tap * line[start + k * sw]


@numba.njit(parallel=True, **_JIT)
def depthwise_conv2d(out, x, w, sh, sw, ph, pw, dh, dw):
    """``out[n, o]`` = the cross-correlation of ``x[n, o // m]`` with ``w[o, 0]`` (``m`` = out/in channels).

    Args:
        out: ``(N, OC, OH, OW)``, C-contiguous, overwritten.
        x: ``(N, C, H, W)``, C-contiguous, unpadded; ``OC`` is a multiple of ``C``.
        w: ``(OC, 1, KH, KW)``.
        sh, sw, ph, pw, dh, dw: stride, leading padding and dilation (height, width).
    """
    for plane in numba.prange(out.shape[0] * out.shape[1]):
        _plane(out, x, w, plane, sh, sw, ph, pw, dh, dw)


@numba.njit(**_JIT)
def depthwise_conv2d_serial(out, x, w, sh, sw, ph, pw, dh, dw):
    """`depthwise_conv2d` on the calling thread: below `PARALLEL_MIN_WORK` waking numba's threads
    costs more than the work."""
    for plane in range(out.shape[0] * out.shape[1]):
        _plane(out, x, w, plane, sh, sw, ph, pw, dh, dw)


PARALLEL_MIN_WORK = 1 << 21
"""Multiply-adds (outputs times taps) from which `depthwise_conv2d` runs on numba's threads."""


def warm(dtype, xp=np):
    """Compile `depthwise_conv2d` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    out = xp.zeros((1, 1, 1, 1), dtype)
    for kernel in (depthwise_conv2d, depthwise_conv2d_serial):
        kernel(out, xp.zeros((1, 1, 1, 1), dtype), xp.zeros((1, 1, 1, 1), dtype), 1, 1, 0, 0, 1, 1)
