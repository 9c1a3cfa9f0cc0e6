"""numba kernels for the convolution work BLAS does not do: depthwise convs (one filter per channel), the
im2col gather of single-group convs and its adjoint (col2im), and the channels-last max pool (with
or without the indices of its maxima).

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
enough work (`parallel_min_work`).

`im2col_nhwc` copies the windows of a range of a channels-last input's
output pixels into a block of columns, padding included (zeros written where
a tap falls outside): `fxkit.backends.conv_lowering.Im2colConv` gathers and
multiplies block by block, so the columns stay in cache (ResNet-18's layer1
at batch 8: 12.5 ms a conv in blocks of 4 MiB, 16 ms with its 58 MB of
columns at once, PyTorch 9.4 ms). It runs on the calling thread unless numpy's
BLAS shares numba's threads (`im2col_nhwc_parallel`): gathered on numba's
threads between two BLAS calls of OpenBLAS's own pool, the same conv took
100-270 ms, each side's workers waiting for cores the other's held; with one
pool, ResNet-18 compiled at batch 8 went from 0.73-0.75x to 0.67x the numpy
backend's time.

`col2im_channel_major` is the adjoint of channel-major im2col
(`fxkit.backends.conv_lowering.channel_major_columns`): the values of a
``(C*KH*KW, N*OH*OW)`` column matrix, tap rows in a weight's own order, added
into the input pixels their windows read (a conv's input gradient, a
transposed conv), one output plane at a time. numpy's version, one strided
add per tap, took 1.1-1.5 ms on ResNet-18's 16x16 to 2x2 maps at batch 8,
this kernel 0.5-1.0 ms.

Imported by `fxkit.backends.conv_lowering` only when a numba specialisation
picks this kernel: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

from fxkit.runtime.blas_threads import share_blas_threads

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
# Measured on the reference machine under load (2 cores, ~6 runnable processes), with numba's threads told
# to sleep between kernels and OpenBLAS's own workers spinning beside them: waking numba's threads cost
# 12-17 ms per call, where one thread did 112x112x32 in 1.2 ms; at batch 8 (8x56x56x144, 33M
# multiply-adds) the two took 31 and 25 ms.
PARALLEL_MIN_WORK = 1 << 25
"""Multiply-adds (outputs times taps) from which the kernel runs on numba's threads, when numpy's BLAS
keeps its own threads."""
PARALLEL_MIN_WORK_SHARED = 1 << 18
"""The same when BLAS runs on numba's threads (`fxkit.runtime.blas_threads`): the threads are awake after
each product, and MobileNetV2 / EfficientNet-B0 compiled took 9.2 / 15.2 ms at batch 1 and 68 / 100 ms
at batch 8, against 11.9 / 18.8 and 95 / 136 ms with `PARALLEL_MIN_WORK` (2 cores, one run, interleaved)."""


def parallel_min_work():
    """`PARALLEL_MIN_WORK_SHARED` when numpy's BLAS shares numba's threads, else `PARALLEL_MIN_WORK`."""
    return PARALLEL_MIN_WORK_SHARED if share_blas_threads() else PARALLEL_MIN_WORK


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
    """`depthwise_conv2d_nhwc` on the calling thread (below `parallel_min_work`)."""
    for row in range(out.shape[0] * out.shape[1]):
        _row_nhwc(out, x, w, bias, row, sh, sw, ph, pw, dh, dw)


@numba.njit(**_JIT)
def im2col_nhwc(columns, x, first, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """The windows of output pixels ``first`` to ``first + len(columns)`` of a channels-last ``x`` as rows of
    ``columns``, zeros where a tap is in the padding, on the calling thread.

    Args:
        columns: ``(P, KH*KW*C)``, C-contiguous, overwritten: row ``i`` holds the window of output pixel
            ``first + i`` (``(n*OH + y)*OW + x``), tap-major then channel.
        x: ``(N, H, W, C)``, C-contiguous, unpadded.
        first: the first output pixel.
        oh, ow, kh, kw, sh, sw, ph, pw, dh, dw: output size, kernel size, stride, leading padding and
            dilation (trailing padding is what the output size leaves).
    """
    for i in range(columns.shape[0]):
        _window(columns, i, x, first + i, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)


@numba.njit(parallel=True, **_JIT)
def im2col_nhwc_parallel(columns, x, first, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """`im2col_nhwc` with its rows spread over numba's threads."""
    for i in numba.prange(columns.shape[0]):
        _window(columns, i, x, first + i, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)


@numba.njit(inline="always", **_JIT)
def _window(columns, i, x, pixel, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """Row ``i`` of `im2col_nhwc`'s columns: the window of output pixel ``pixel``."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    zero = columns.dtype.type(0)
    image = pixel // (oh * ow)
    y = (pixel // ow) % oh
    xo = pixel % ow
    for p in range(kh):
        iy = y * sh - ph + p * dh
        for q in range(kw):
            ix = xo * sw - pw + q * dw
            start = (p * kw + q) * c
            if 0 <= iy < h and 0 <= ix < w:
                for k in range(c):
                    columns[i, start + k] = x[image, iy, ix, k]
            else:
                for k in range(c):
                    columns[i, start + k] = zero


@numba.njit(**_JIT)
def _image_plane(out, columns, plane, kh, kw, sh, sw, ph, pw, dh, dw):
    """Plane ``plane`` (``n * C + c``) of `col2im_channel_major`."""
    n, c, h, w = out.shape
    oh, ow = columns.shape[1] // n, columns.shape[2]
    image = plane // c
    ch = plane - image * c
    zero = out.dtype.type(0)
    for y in range(h):
        for xi in range(w):
            out[image, ch, y, xi] = zero
    for p in range(kh):
        for q in range(kw):
            offset = q * dw - pw
            first = min(ow, max(0, (-offset + sw - 1) // sw))
            end = max(first, min(ow, (w - 1 - offset) // sw + 1))
            r = (ch * kh + p) * kw + q
            for oy in range(oh):
                y = oy * sh - ph + p * dh
                if y < 0 or y >= h:
                    continue
                source = image * oh + oy
                if sw == 1:
                    for xo in range(first, end):
                        out[image, ch, y, xo + offset] += columns[r, source, xo]
                else:
                    for xo in range(first, end):
                        out[image, ch, y, xo * sw + offset] += columns[r, source, xo]


@numba.njit(**_JIT)
def col2im_channel_major(out, columns, kh, kw, sh, sw, ph, pw, dh, dw):
    """The adjoint of channel-major im2col: every column value added into the input pixel its tap read, one
    output plane after another on the calling thread (it follows a BLAS product, whose workers would hold the
    cores numba's threads wait for).

    Args:
        out: ``(N, C, H, W)``, C-contiguous, overwritten.
        columns: ``(C*KH*KW, N*OH, OW)``, C-contiguous: row ``(c*KH + p)*KW + q`` holds tap ``(p, q)`` of
            channel ``c``, column ``(n*OH + y)*OW + x`` output pixel ``(y, x)`` of image ``n``; taps that
            fell in the padding are dropped.
        kh, kw, sh, sw, ph, pw, dh, dw: kernel size, stride, leading padding and dilation.
    """
    for plane in range(out.shape[0] * out.shape[1]):
        _image_plane(out, columns, plane, kh, kw, sh, sw, ph, pw, dh, dw)


@numba.njit(**_JIT)
def max_pool_nhwc(out, x, kh, kw, sh, sw, ph, pw, indices=None):
    """Channels-last max pool: ``out[n, y, x, c]`` = the largest of the window's taps inside the input (padding
    never wins, as the eager pool's -inf border), on the calling thread: the inner loop runs along the
    contiguous channels. A tap replaces the maximum when strictly greater or NaN, in window order from the
    first tap inside the input, so ties keep the first and the last NaN wins, as PyTorch's scan; with
    ``indices`` (the eager pool's ``return_indices``, what a training graph's pool backward scatters by) the
    flat ``iy * W + ix`` of the tap kept is written too. numba compiles the call without ``indices`` apart
    (a None argument's branches are pruned), so an inference pool stores no index.

    numpy's nine strided ``maximum`` passes took 11.3 ms for ResNet-18's pool at batch 8 (224x224); its
    masked update of a tap array per tap, for the indices, 6.1 ms for the pool of a batch-8 training step at
    64x64.

    Args:
        out: ``(N, OH, OW, C)``, C-contiguous, overwritten.
        x: ``(N, H, W, C)``, C-contiguous, unpadded.
        kh, kw, sh, sw, ph, pw: window, stride and leading padding.
        indices: None, or ``(N, OH, OW, C)`` int64, C-contiguous, overwritten.
    """
    n, oh, ow, c = out.shape
    h, w = x.shape[1], x.shape[2]
    for image in range(n):
        for y in range(oh):
            for xo in range(ow):
                first = True
                for p in range(kh):
                    iy = y * sh - ph + p
                    if iy < 0 or iy >= h:
                        continue
                    for q in range(kw):
                        ix = xo * sw - pw + q
                        if ix < 0 or ix >= w:
                            continue
                        flat = iy * w + ix
                        if first:
                            for k in range(c):
                                out[image, y, xo, k] = x[image, iy, ix, k]
                            if indices is not None:
                                for k in range(c):
                                    indices[image, y, xo, k] = flat
                            first = False
                        elif indices is None:
                            for k in range(c):
                                v = x[image, iy, ix, k]
                                m = out[image, y, xo, k]
                                out[image, y, xo, k] = v if v > m or v != v else m
                        else:
                            for k in range(c):
                                v = x[image, iy, ix, k]
                                taken = v > out[image, y, xo, k] or v != v
                                out[image, y, xo, k] = v if taken else out[image, y, xo, k]
                                indices[image, y, xo, k] = flat if taken else indices[image, y, xo, k]


def warm(dtype, xp=np):
    """Compile both entry points for ``dtype`` now (the specialisation's compile time, not its first call)."""
    out = xp.zeros((1, 1, 1, 1), dtype)
    for kernel in (depthwise_conv2d_nhwc, depthwise_conv2d_nhwc_serial):
        kernel(out, out, xp.zeros((1, 1, 1), dtype), xp.zeros(1, dtype), 1, 1, 0, 0, 1, 1)


def warm_max_pool(dtype, xp=np):
    """Compile `max_pool_nhwc`, with and without indices, for ``dtype`` now (the specialisation's compile
    time, not its first call)."""
    x = xp.zeros((1, 1, 1, 1), dtype)
    max_pool_nhwc(x.copy(), x, 1, 1, 1, 1, 0, 0)
    max_pool_nhwc(x.copy(), x, 1, 1, 1, 1, 0, 0, xp.zeros(x.shape, np.int64))


def warm_im2col(dtype, xp=np):
    """Compile `im2col_nhwc` (and its parallel form) for ``dtype`` now (the specialisation's compile time,
    not its first call)."""
    x = xp.zeros((1, 1, 1, 1), dtype)
    for gather in (im2col_nhwc, im2col_nhwc_parallel):
        gather(xp.zeros((1, 1), dtype), x, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)


def warm_col2im(dtype, xp=np):
    """Compile `col2im_channel_major` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    col2im_channel_major(xp.zeros((1, 1, 1, 1), dtype), xp.zeros((1, 1, 1), dtype), 1, 1, 1, 1, 0, 0, 1, 1)
