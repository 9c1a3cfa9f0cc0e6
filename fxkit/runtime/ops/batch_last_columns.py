"""im2col and col2im for small feature maps, with the batch as the innermost dimension.

On a small map (a 4x4 ResNet layer, the 4x4 second conv of the digits Net) the rows of
an NCHW image are a handful of elements long, so the copy that gathers im2col's
columns, and col2im's adds, move a few elements per inner step: numpy spends its time
in loop overhead, not moving data (gathering the 288 x 512 columns of a 32x32x4x4
batch takes 0.2 ms). Copying the input once to ``(C, *spatial, N)`` makes every such
run ``width * N`` contiguous elements long: the same gather takes 0.03 ms, and a
batch-8 col2im on ResNet-18's 4x4 maps drops from 1.2 to 0.7 ms (2 cores).

The columns come out as ``(G, Cg * K, OUT... * N)``, pixels outer and images inner;
callers lay their other operand out the same way, and products come out batch-last.
"""
import math

from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.ops.scratch import gathered, scratch

# An NCHW row of the output at least this long keeps the plain gather: its runs are long
# enough that copying the input batch-last first no longer pays (8x8 maps gain, 16x16 tie).
SHORT_ROW = 16


def has_short_rows(out_sizes):
    """Whether a conv with these output spatial sizes moves short runs in NCHW order."""
    return out_sizes[-1] < SHORT_ROW


def batch_last_input(xp, x, pads):
    """``x`` ``(N, C, *spatial)`` copied to a contiguous ``(C, *padded spatial, N)``, with a zero
    border of ``pads`` (a ``(before, after)`` pair per spatial dim), in scratch memory."""
    nd = x.ndim - 2
    padded = tuple(lo + size + hi for size, (lo, hi) in zip(x.shape[2:], pads))
    moved = x.transpose((1,) + tuple(range(2, 2 + nd)) + (0,))
    out = scratch(xp, "batch-last input", (x.shape[1],) + padded + (x.shape[0],), x.dtype)
    if any(lo or hi for lo, hi in pads):
        out.fill(0)
    out[(slice(None),) + tuple(slice(lo, lo + size) for size, (lo, _) in zip(x.shape[2:], pads))] = moved
    return out


def batch_last_columns(xp, xt, groups, kernel, stride, dilation, out_sizes, out=None):
    """im2col of a batch-last input ``xt`` (`batch_last_input`): ``(G, Cg * K, OUT... * N)``,
    row ``(c, taps...)``, column ``(out pixel..., image)``; one copy, into scratch memory or into
    ``out`` (a contiguous array of that size, which the caller keeps)."""
    c, n = xt.shape[0], xt.shape[-1]
    cg = c // groups
    s_c, spatial_strides, s_n = xt.strides[0], xt.strides[1:-1], xt.strides[-1]
    taps = tuple(st * d for st, d in zip(spatial_strides, dilation))
    moves = tuple(st * s for st, s in zip(spatial_strides, stride))
    cols = xp.lib.stride_tricks.as_strided(
        xt, (groups, cg) + tuple(kernel) + tuple(out_sizes) + (n,), (cg * s_c, s_c) + taps + moves + (s_n,))
    shape = (groups, cg * math.prod(kernel), math.prod(out_sizes) * n)
    if out is None:
        return gathered(xp, "batch-last columns", cols, shape)
    out.reshape(cols.shape)[...] = cols
    return out.reshape(shape)


def batch_last_rows(xp, values, groups):
    """``values`` ``(N, C, *spatial)`` (a conv's output gradient, any memory layout) as the rows that multiply
    batch-last columns: ``(G, C / G, spatial... * N)``, copied into scratch memory."""
    n, c = values.shape[:2]
    nd = values.ndim - 2
    pixels = math.prod(values.shape[2:])
    moved = values.transpose((1,) + tuple(range(2, 2 + nd)) + (0,))
    return gathered(xp, "batch-last rows", moved, (groups, c // groups, pixels * n))


def batch_first(xp, prod, channels, out_sizes, n, out=None):
    """A batch-last product ``(G, OCg, OUT... * N)`` (scratch memory) copied to a new contiguous
    ``(N, OC, OUT...)``, or into ``out`` of that shape: always a copy, even where the transposed
    view is contiguous (N = 1)."""
    nd = len(out_sizes)
    moved = prod.reshape((channels,) + tuple(out_sizes) + (n,)).transpose((nd + 1, 0) + tuple(range(1, nd + 1)))
    if out is None:
        return moved.copy()
    out[...] = moved
    return out


def col2im_batch_last(xp, x, wmat, out_channels, kernel, stride, padding, dilation, out_hw, out=None):
    """The transposed convolution (no bias) of a batched ``x`` ``(N, C, H, W)`` (any memory layout) by
    ``wmat`` ``(G, OCg * kH * kW, Cg)``, as a new ``(N, OC, OH, OW)`` or into ``out`` of that shape
    (any layout): one product gives every input
    pixel's contribution to each tap, batch-last, and each tap's block is added into the
    strided slice of the batch-last output it lands on (`tap_span` clips it)."""
    n, c, h, w = x.shape
    g = wmat.shape[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = kernel, stride, padding, dilation, out_hw
    xt = batch_last_input(xp, x, ((0, 0), (0, 0))).reshape(g, c // g, h * w * n)
    taps = xp.matmul(wmat, xt, out=scratch(xp, "batch-last product", (g, wmat.shape[1], h * w * n), x.dtype))
    taps = taps.reshape(out_channels, kh, kw, h, w, n)
    if loops_fit(xp, taps):
        from fxkit.runtime.ops.col2im_loop import col2im_nchw  # NOTE: numba loads at the first large col2im

        out = xp.empty((n, out_channels, oh, ow), x.dtype) if out is None else out
        col2im_nchw(taps, out, stride, padding, dilation)
        return out
    sums = scratch(xp, "batch-last col2im", (out_channels, oh, ow, n), x.dtype)
    sums.fill(0)
    for i in range(kh):
        y0, y1, top = tap_span(h, oh, i * dh - ph, sh)
        for j in range(kw):
            x0, x1, left = tap_span(w, ow, j * dw - pw, sw)
            if y1 > y0 and x1 > x0:
                sums[:, top:top + (y1 - y0 - 1) * sh + 1:sh, left:left + (x1 - x0 - 1) * sw + 1:sw] += \
                    taps[:, i, j, y0:y1, x0:x1]
    return batch_first(xp, sums, out_channels, (oh, ow), n, out)


def tap_span(size, out_size, offset, stride):
    """``(first, end, landing)``: the input positions ``t`` in ``[first, end)`` whose output
    position ``t * stride + offset`` falls inside ``[0, out_size)``, and where ``first`` lands."""
    first = max(0, -(offset // stride))
    end = min(size, (out_size - 1 - offset) // stride + 1)
    return first, end, first * stride + offset
