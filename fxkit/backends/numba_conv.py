"""numba kernels for the convolutions BLAS serves badly: depthwise (one filter per channel), and the
im2col gather of large single-group convs.

A depthwise conv2d (``groups == in_channels``: MobileNet, EfficientNet) is,
through im2col, ``N * C`` matrix products of a ``1 x kH*kW`` row by a
``kH*kW x OH*OW`` block: BLAS gets no reuse from such shapes and the columns
are ``kH*kW`` times the input. Here each output pixel's channels are
accumulated directly, one kernel tap at a time, in channels-last memory: the
inner loop runs along the channels, contiguous in input, weights and output,
so LLVM vectorises it whatever the map size (a planar kernel's rows are only
7 or 14 pixels long in the last stages; measured 0.05 ms against numpy's
0.46 ms for 960 channels of 7x7). Padding is a bounds test per tap, never a
padded copy. Output rows are spread over numba's threads when there is
enough work (`PARALLEL_MIN_WORK`).

`im2col_nhwc` copies a channels-last input's windows into the column
matrix of one product, padding included (zeros written where a tap falls
outside), on numba's threads: at batch 8 a 3x3 conv's columns are 58 MB
(ResNet-18's layer1), which numpy's one-threaded strided copy, after a
padded copy of the input, moved in ~8 ms on the reference machine while
BLAS multiplied them on two threads in ~30.

Imported by `fxkit.backends.conv_lowering` only when a numba specialisation
picks this kernel: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
# Measured on the reference machine under load (2 cores, ~6 runnable processes): waking numba's
# sleeping threads cost 12-17 ms per call, where one thread did 112x112x32 in 1.2 ms; at batch 8
# (8x56x56x144, 33M multiply-adds) the two took 31 and 25 ms.
PARALLEL_MIN_WORK = 1 << 25
"""Multiply-adds (outputs times taps) from which the kernel runs on numba's threads."""


@numba.njit(**_JIT)
def _row_nhwc(out, x, w, bias, row, sh, sw, ph, pw, dh, dw):
    """Output row ``row`` (``n * OH + y``) of `depthwise_conv2d_nhwc`."""
    h, wd, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow, oc = out.shape[1], out.shape[2], out.shape[3]
    kh, kw = w.shape[0], w.shape[1]
    multiplier = oc // c
    image = row // oh
    y = row - image * oh
    for xo in range(ow):
        acc = out[image, y, xo]
        acc[:] = bias
        for p in range(kh):
            iy = y * sh - ph + p * dh
            if iy < 0 or iy >= h:
                continue
            for q in range(kw):
                ix = xo * sw - pw + q * dw
                if ix < 0 or ix >= wd:
                    continue
                src = x[image, iy, ix]
                taps = w[p, q]
                if multiplier == 1:
                    for k in range(oc):
                        acc[k] += taps[k] * src[k]
                else:
                    for k in range(oc):
                        acc[k] += taps[k] * src[k // multiplier]


@numba.njit(parallel=True, **_JIT)
def depthwise_conv2d_nhwc(out, x, w, bias, sh, sw, ph, pw, dh, dw):
    """Channels-last depthwise conv: ``out[n, y, x, o]`` = ``bias[o]`` + the taps ``w[:, :, o]`` over
    ``x[n, :, :, o // m]`` (``m`` = out/in channels).

    The inner loop runs along the channels, contiguous in both ``x`` and
    ``out``: it vectorises at any map size (the planar kernel's rows are only
    7 or 14 pixels long on small maps).

    Args:
        out: ``(N, OH, OW, OC)``, C-contiguous, overwritten.
        x: ``(N, H, W, C)``, C-contiguous, unpadded.
        w: ``(KH, KW, OC)``, C-contiguous.
        bias: ``(OC,)`` (zeros for a conv without one).
        sh, sw, ph, pw, dh, dw: stride, leading padding and dilation (height, width).
    """
    for row in numba.prange(out.shape[0] * out.shape[1]):
        _row_nhwc(out, x, w, bias, row, sh, sw, ph, pw, dh, dw)


@numba.njit(**_JIT)
def depthwise_conv2d_nhwc_serial(out, x, w, bias, sh, sw, ph, pw, dh, dw):
    """`depthwise_conv2d_nhwc` on the calling thread (below `PARALLEL_MIN_WORK`)."""
    for row in range(out.shape[0] * out.shape[1]):
        _row_nhwc(out, x, w, bias, row, sh, sw, ph, pw, dh, dw)


@numba.njit(parallel=True, **_JIT)
def im2col_nhwc(columns, x, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """The windows of a channels-last ``x`` as rows of ``columns``, zeros where a tap is in the padding.

    Args:
        columns: ``(N*OH*OW, KH*KW*C)``, C-contiguous, overwritten: row ``(n*OH + y)*OW + x`` holds
            the window of output pixel ``(y, x)`` of image ``n``, tap-major then channel.
        x: ``(N, H, W, C)``, C-contiguous, unpadded.
        oh, ow, kh, kw, sh, sw, ph, pw, dh, dw: output size, kernel size, stride, leading padding and
            dilation (trailing padding is what the output size leaves).
    """
    n, h, w, c = x.shape
    flat = x.reshape(n * h * w * c)
    span = kw * c
    for row in numba.prange(n * oh):
        image = row // oh
        y = row - image * oh
        for xo in range(ow):
            window = columns[row * ow + xo]
            left = xo * sw - pw
            for p in range(kh):
                iy = y * sh - ph + p * dh
                start = p * span
                if iy < 0 or iy >= h:
                    for k in range(span):
                        window[start + k] = 0
                elif dw == 1 and left >= 0 and left + kw <= w:
                    # NOTE: the row's taps are adjacent pixels: one run of kw * c values (a stem's 3 channels)
                    source = ((image * h + iy) * w + left) * c
                    for k in range(span):
                        window[start + k] = flat[source + k]
                else:
                    for q in range(kw):
                        ix = left + q * dw
                        if 0 <= ix < w:
                            src = x[image, iy, ix]
                            for k in range(c):
                                window[start + q * c + k] = src[k]
                        else:
                            for k in range(c):
                                window[start + q * c + k] = 0


def warm(dtype, xp=np):
    """Compile both entry points for ``dtype`` now (the specialisation's compile time, not its first call)."""
    out = xp.zeros((1, 1, 1, 1), dtype)
    for kernel in (depthwise_conv2d_nhwc, depthwise_conv2d_nhwc_serial):
        kernel(out, out, xp.zeros((1, 1, 1), dtype), xp.zeros(1, dtype), 1, 1, 0, 0, 1, 1)


def warm_im2col(dtype, xp=np):
    """Compile `im2col_nhwc` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    im2col_nhwc(xp.zeros((1, 1), dtype), xp.zeros((1, 1, 1, 1), dtype), 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)
