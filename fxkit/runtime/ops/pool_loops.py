"""numba loops for eager max pooling: the 2-D pool with its indices, and the scatters of its backward.

numpy runs a max pool one kernel tap at a time over strided views. On the small maps of a training
step those views have rows of 2-4 elements, so numpy's loop overhead, not the data, sets the time: a
2x2 pool of 32x64x4x4 with indices took 100 us (a 6-D gathering copy, four masked updates, an index
table), the loop here 37 us (2x2 windows inside the input run unrolled; 8x64x32x32 with a 3x3/2
window: 1312 -> 717 us). The backward scatters each gradient to the position its index
names, by rows (`scatter_rows`, `scatter_add_rows`; the numba backend lowers a training graph's scatters
to `scatter_rows` too).

Every loop computes what the numpy form computes, bit for bit, so eager results do not depend on
which one ran: the pool scans each window as PyTorch does (a value replaces the maximum when greater
or NaN, starting from the lowest value at the window's first real element), a plain scatter keeps the
last write, and a summing scatter adds either sequentially in the dtype (numpy's ``add.at``) or, as
`fxkit.runtime.autograd.backward_ops.scatter_add` does where picks are dense, in float64 rounded once.

Imported by the ops only where `fxkit.runtime.ops.loop_gate.loops_fit` lets them run (numba takes ~0.5 s
to import, which a small pool should not pay). The loops run on the calling thread, like numpy's.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(inline="always", **_JIT)
def _taps_inside(start, k, d, size):
    """``(lo, hi)``: the taps ``lo <= t < hi`` of a window starting at ``start`` (dilation ``d``) that fall in
    ``[0, size)``."""
    lo = 0
    while lo < k and start + lo * d < 0:
        lo += 1
    hi = k
    while hi > lo and start + (hi - 1) * d >= size:
        hi -= 1
    return lo, hi


@numba.njit(inline="always", **_JIT)
def _window(x, p, w, ys, xs, i0, i1, j0, j1, dh, dw, lowest, nan_test):
    """``(maximum, flat index)`` of one window of plane ``p`` by PyTorch's scan over its taps
    ``i0 <= i < i1``, ``j0 <= j < j1``."""
    best = lowest
    at = (ys + i0 * dh) * w + xs + j0 * dw
    for i in range(i0, i1):
        row = (ys + i * dh) * w + xs
        for j in range(j0, j1):
            k = row + j * dw
            v = x[p, k]
            take = (v > best) | (v != v) if nan_test else v > best
            best = v if take else best
            at = k if take else at
    return best, at


@numba.njit(inline="always", **_JIT)
def _clipped(x, h, w, out, indices, rows, cols, kernel, stride, padding, dilation, lowest, nan_test):
    """Windows in output rows ``rows[0] <= y < rows[1]`` and columns ``cols[0] <= xo < cols[1]`` of every
    plane, each clipped to the input."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    for p in range(x.shape[0]):
        for y in range(rows[0], rows[1]):
            ys = y * sh - ph
            i0, i1 = _taps_inside(ys, kh, dh, h)
            for xo in range(cols[0], cols[1]):
                xs = xo * sw - pw
                j0, j1 = _taps_inside(xs, kw, dw, w)
                out[p, y, xo], indices[p, y, xo] = _window(x, p, w, ys, xs, i0, i1, j0, j1, dh, dw, lowest, nan_test)


@numba.njit(inline="always", **_JIT)
def _inside(x, w, out, indices, rows, cols, stride, padding, lowest, k):
    """Windows of ``k x k`` taps (``k`` a compile-time constant: the taps unroll), dilation 1, that lie
    wholly inside the input: output rows ``rows[0] <= y < rows[1]``, columns ``cols[0] <= xo < cols[1]``."""
    (sh, sw), (ph, pw) = stride, padding
    for p in range(x.shape[0]):
        for y in range(rows[0], rows[1]):
            ys = y * sh - ph
            for xo in range(cols[0], cols[1]):
                out[p, y, xo], indices[p, y, xo] = _window(x, p, w, ys, xo * sw - pw, 0, k, 0, k, 1, 1, lowest, False)


@numba.njit(inline="always", **_JIT)
def _whole_windows(out_size, size, k, s, p, d):
    """``(first, end)``: the outputs along an axis whose windows lie wholly inside ``[0, size)``."""
    first, end = 0, out_size
    while first < out_size and first * s - p < 0:
        first += 1
    while end > first and (end - 1) * s - p + (k - 1) * d >= size:
        end -= 1
    return first, end


@numba.njit(**_JIT)
def max_pool2d_planes(x, h, w, out, indices, kernel, stride, padding, dilation, lowest, nan_test):
    """Max pool of the planes ``x`` ``(P, H * W)`` (C-contiguous) into ``out`` ``(P, OH, OW)``, each maximum's
    flat index into its plane in ``indices`` (int64, same shape).

    A window starts from ``lowest`` at its first real element; a tap replaces the maximum when greater, or
    when NaN if ``nan_test`` (PyTorch's scan: ties keep the first, the last NaN wins). Without NaN in ``x``
    the test changes nothing and is left out: it costs 2.5x. 2x2 and 3x3 windows inside the input run
    in a loop of their own with the taps unrolled (7x faster than the clipped windows' loop, which
    runs the borders)."""
    oh, ow = out.shape[1], out.shape[2]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    if nan_test or dh != 1 or dw != 1 or kh != kw or kh not in (2, 3):
        _clipped(x, h, w, out, indices, (0, oh), (0, ow), kernel, stride, padding, dilation, lowest, nan_test)
        return
    ya, yb = _whole_windows(oh, h, kh, sh, ph, dh)
    xa, xb = _whole_windows(ow, w, kw, sw, pw, dw)
    if kh == 2:
        _inside(x, w, out, indices, (ya, yb), (xa, xb), stride, padding, lowest, 2)
    else:
        _inside(x, w, out, indices, (ya, yb), (xa, xb), stride, padding, lowest, 3)
    for rows, cols in (((0, ya), (0, ow)), ((yb, oh), (0, ow)), ((ya, yb), (0, xa)), ((ya, yb), (xb, ow))):
        _clipped(x, h, w, out, indices, rows, cols, kernel, stride, padding, dilation, lowest, False)


@numba.njit(**_JIT)
def scatter_rows(out, index, src, add):
    """``out[r, index[r, j]] = src[r, j]`` (``+=`` when ``add``, one by one in the dtype, as ``add.at``) for
    every row ``r`` in order, so the last write stays. Also the numba backend's lowered scatter.

    Args:
        out: ``(R, L)``, C-contiguous, holding the scatter's input; written in place.
        index: ``(R, J)`` int64.
        src: ``(R, J)``, ``out``'s dtype.

    Returns:
        True, or False at the first index outside ``[0, L)`` (``out`` is then partly written: the caller
        runs the eager op, for its error).
    """
    return _in_order(out, index, src, add)


@numba.njit(**_JIT)
def _in_order(out, index, src, add):
    """`scatter_rows`' loop (`scatter_add_rows` runs it too)."""
    length = out.shape[1]
    for r in range(out.shape[0]):
        for j in range(index.shape[1]):
            i = index[r, j]
            if i < 0 or i >= length:
                return False
            if add:
                out[r, i] += src[r, j]
            else:
                out[r, i] = src[r, j]
    return True


@numba.njit(**_JIT)
def scatter_add_rows(out, index, src, wide):
    """`scatter_rows` adding (``add``), or with ``wide`` each position's picks summed in float64 in order and
    added to it once (what a weighted ``bincount`` and one ``add`` give). Returns as `scatter_rows` does."""
    if not wide:
        return _in_order(out, index, src, True)
    length = out.shape[1]
    sums = np.zeros(length, np.float64)
    for r in range(out.shape[0]):
        sums[:] = 0.0
        for j in range(index.shape[1]):
            i = index[r, j]
            if i < 0 or i >= length:
                return False
            sums[i] += src[r, j]
        for k in range(length):
            out[r, k] = out[r, k] + sums[k]
    return True


def warm_scatter(dtype):
    """Compile `scatter_rows` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    scatter_rows(np.zeros((1, 1), dtype), np.zeros((1, 1), np.int64), np.zeros((1, 1), dtype), True)
