"""Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d and adaptive_max_pool2d, as in PyTorch.

The window ops loop over the kernel's taps, not over the data: each tap is
one strided slice of the (padded) input covering every output position, so a
3x3 pool is nine whole-array ``maximum``/``add`` calls (written over any number
of spatial dims: `pooling3d` runs the same ``max_pool``/``avg_pool``), faster in numpy than
reducing a windowed view over its two small trailing axes. The averaging
pools add bfloat16 up in float32 and round once, as PyTorch does
(`low_precision.run_in_float32`); max pooling only selects, so it runs in the
input's dtype.
"""
import functools
import itertools
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.batch_last_columns import SHORT_ROW
from fxkit.runtime.ops.conv import check_rank, ntuple, pad_spatial, sliding_size
from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import dtype_of, require_float, shown
from fxkit.runtime.ops.scratch import scratch


def _pool_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size (``pooling_output_shape``)."""
    out = sliding_size(size, 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0), s)
    # NOTE: ceil mode drops a last window that would start in the right padding; a symbolic
    # size cannot be compared, so the rule then assumes the window starts inside.
    if ceil_mode and isinstance(out, int) and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(name, x, kernel_size, stride, padding, dilation, ceil_mode, nd=2):
    """Check an ``nd``-D pool's arguments like PyTorch; returns ``(batched, kernel, stride, padding,
    dilation, out_shape)`` with ``nd``-tuples for the spatial arguments."""
    batched = check_rank(name, x.shape, nd + 2)
    kernel = ntuple(kernel_size, nd, name, "kernel_size")
    stride = kernel if stride is None or stride == () or stride == [] else ntuple(stride, nd, name, "stride")
    padding = ntuple(padding, nd, name, "padding")
    dilation = ntuple(dilation, nd, name, "dilation")
    for values, what in ((kernel, "kernel_size"), (stride, "stride"), (dilation, "dilation")):
        if any(v < 1 for v in values):
            raise ShapeError(f"{name}: {what} must be positive, got {list(values)}")
    if any(p < 0 or p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(f"{name}: pad should be at most half of kernel size, but got padding={list(padding)} "
                         f"for kernel_size={list(kernel)}")
    out = tuple(_pool_size(size, k, s, p, d, ceil_mode)
                for size, k, s, p, d in zip(x.shape[-nd:], kernel, stride, padding, dilation))
    if any(isinstance(o, int) and o < 1 for o in out):
        raise ShapeError(f"{name}: input of shape {shown(x.shape)} gives an output of size {list(out)}, "
                         f"which is too small; use a smaller kernel_size or more padding")
    return batched, kernel, stride, padding, dilation, tuple(x.shape[:-nd]) + out


def _windows(x, kernel, stride, dilation, out_hw):
    """Yield ``(taps, view)``: for each kernel tap (a tuple of per-axis offsets, row-major), the
    input values it sees at every output position."""
    spans = [(o - 1) * s + 1 for o, s in zip(out_hw, stride)]
    for taps in itertools.product(*(range(k) for k in kernel)):
        yield taps, x[(Ellipsis,) + tuple(slice(t * d, t * d + span, s)
                                          for t, d, span, s in zip(taps, dilation, spans, stride))]


def _padded(xp, x, kernel, stride, padding, dilation, out_hw, value):
    """``x`` batched with the border its windows reach into (PyTorch's padding plus ceil mode's overhang)."""
    nd = len(kernel)
    if x.ndim == nd + 1:
        x = x[None]
    pad_after = [max(0, (o - 1) * s + d * (k - 1) + 1 - size - p)
                 for o, s, d, k, size, p in zip(out_hw, stride, dilation, kernel, x.shape[-nd:], padding)]
    if any(padding) or any(pad_after):
        x = pad_spatial(xp, x, tuple(zip(padding, pad_after)), value)
    return x


def _first_inside(start, step):
    """The first of ``start, start + step, ...`` that is >= 0: where a window's real part begins."""
    return np.where(start < 0, start + step * ((step - 1 - start) // step), start)


def _max_with_indices(xp, x, sizes, kernel, stride, padding, dilation, out_hw, lowest, floating):
    """Max pooling of the padded ``x`` with PyTorch's indices into the unpadded spatial dims
    (``sizes``, flattened: ``H * W`` or ``D * H * W``).

    PyTorch scans each window from -inf with its index at the window's first
    real element; a tap replaces the maximum when strictly greater or NaN, so
    the -inf border never wins and ties keep the first. The winning tap is
    tracked in a small integer array and becomes a flat index once. Taps are
    scanned in increasing order, so the winner is the largest tap that took
    over: ``tap = maximum(tap, took * t)``, two ufuncs a tap where masked copies
    (``where``, ``copyto``) are ten times slower on a random mask. Windows without
    NaN need no NaN test; a NaN anywhere shows in the maxima (``maximum``
    propagates it), and only then is the pool scanned again with the test.
    """
    first_tap, offsets, window_starts = _index_plan(sizes, kernel, stride, padding, dilation, tuple(out_hw))
    windows = _tap_major_windows(xp, x, kernel, stride, dilation, out_hw)
    best, tap = _scan_windows(xp, windows, lowest, first_tap, False)
    if floating and bool(xp.isnan(best).any()):
        best, tap = _scan_windows(xp, windows, lowest, first_tap, True)
    index = xp.take(xp.asarray(offsets), tap)
    index += xp.asarray(window_starts)
    return best, index


@functools.lru_cache(maxsize=256)
def _index_plan(sizes, kernel, stride, padding, dilation, out_hw):
    """What turns winning taps into PyTorch's flat indices, for one pool geometry (the same on
    every call of a layer, so kept): ``(first_tap, offsets, window_starts)``, numpy arrays.

    ``first_tap`` (broadcast over the output grid, uint8 or int32 as the tap count needs) is each
    window's first real tap, where PyTorch's scan starts; ``offsets[t]`` is tap ``t``'s flat offset
    from its window's start; ``window_starts`` (broadcast over the grid) each window's flat start."""
    nd = len(kernel)
    # per axis: each window's first position (in the unpadded input) and the tap of its first real element
    starts = [np.arange(o) * s - p for o, s, p in zip(out_hw, stride, padding)]
    firsts = [(_first_inside(start, d) - start) // d for start, d in zip(starts, dilation)]
    tap_strides = [math.prod(kernel[a + 1:]) for a in range(nd)]
    flat_strides = [math.prod(sizes[a + 1:]) for a in range(nd)]
    taps_total = math.prod(kernel)
    first_tap = sum(f * ts for f, ts in zip(np.ix_(*firsts), tap_strides))
    first_tap = first_tap.astype(np.uint8 if taps_total <= 256 else np.int32)
    taps = np.arange(taps_total)
    offsets = sum(taps // ts % k * d * fs for ts, k, d, fs in zip(tap_strides, kernel, dilation, flat_strides))
    window_starts = sum(start * fs for start, fs in zip(np.ix_(*starts), flat_strides))
    for kept in (first_tap, offsets, window_starts):
        kept.flags.writeable = False
    return first_tap, offsets, window_starts


def _tap_major_windows(xp, x, kernel, stride, dilation, out_hw):
    """Per kernel tap (row-major), the values it sees at every output position.

    Short output rows make each of these strided views a slow ufunc operand (numpy steps through
    rows of a few elements: 25 us a pass over a 32x32x8x8 pool, against 2 us contiguous), so they
    are copied once, tap-major, into scratch memory; long rows keep the views."""
    if out_hw[-1] >= SHORT_ROW:
        return [v for _, v in _windows(x, kernel, stride, dilation, out_hw)]
    nd = len(kernel)
    lead, spatial_strides = x.shape[:-nd], x.strides[-nd:]
    shape = tuple(kernel) + lead + tuple(out_hw)
    views = xp.lib.stride_tricks.as_strided(
        x, shape, tuple(st * d for st, d in zip(spatial_strides, dilation)) + x.strides[:-nd]
        + tuple(st * s for st, s in zip(spatial_strides, stride)))
    stacked = scratch(xp, "pool windows", shape, x.dtype)
    stacked[...] = views
    return list(stacked.reshape((int(np.prod(kernel)),) + lead + tuple(out_hw)))


def _scan_windows(xp, windows, lowest, first_tap, nan_wins):
    """``(maxima, winning taps)`` of the ``windows`` (one array per tap, in scan order) by PyTorch's
    scan (see `_max_with_indices`); ``nan_wins`` adds the NaN test (a NaN tap takes over even from
    a NaN maximum)."""
    shape, tap_dtype = windows[0].shape, first_tap.dtype.type
    tap = xp.empty(shape, tap_dtype)
    tap[...] = xp.asarray(first_tap)
    if not first_tap.any() and not nan_wins:
        best = windows[0].copy()  # every window starts inside: its first tap is the first maximum
        start = 1
    else:
        best = xp.full(shape, lowest, windows[0].dtype)
        start = 0
    took, weighted = xp.empty(shape, np.bool_), xp.empty(shape, tap_dtype)
    nan = xp.empty(shape, np.bool_) if nan_wins else None
    for t, v in enumerate(windows[start:], start):
        xp.greater(v, best, out=took)
        if nan_wins:
            xp.logical_or(took, xp.isnan(v, out=nan), out=took)
        xp.maximum(best, v, out=best)  # the value PyTorch's scan keeps, NaN included
        xp.multiply(took, tap_dtype(t), out=weighted)
        xp.maximum(tap, weighted, out=tap)
    return best, tap


def _max_pool_rule(name, nd):
    """The shape rule of the ``nd``-D max pool ``name``."""
    def rule(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        out_shape = _pool_geometry(name, input, kernel_size, stride, padding, dilation, ceil_mode, nd)[-1]
        values = TensorMeta(out_shape, input.dtype, input.device)
        return (values, TensorMeta(out_shape, _dt.int64, input.device)) if return_indices else values
    return rule


def max_pool(xp, name, nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    """The ``nd``-D max pool of `max_pool2d` and `max_pool3d`, errors reported under ``name``."""
    _, kernel, stride, padding, dilation, out_shape = _pool_geometry(
        name, input, kernel_size, stride, padding, dilation, ceil_mode, nd)
    dtype = dtype_of(input)
    if dtype is _dt.bool_:
        raise DTypeError(f"{name}: bool tensors are not supported; cast the input with .float() first")
    floating = dtype.is_floating_point
    lowest = -np.inf if floating else np.iinfo(input.dtype).min
    out_hw = out_shape[-nd:]
    # NOTE: numpy's maximum over long rows beats the loop when no indices are asked for (8x64x32x32,
    # 3x3/2: 584 against 711 us); with indices, or on short rows, the loop is 1.5-3x faster.
    if (nd == 2 and (return_indices or out_hw[-1] < SHORT_ROW) and loops_fit(xp, input)
            and input.flags.c_contiguous):
        return _max_pool2d_loop(input, kernel, stride, padding, dilation, out_shape, lowest, return_indices)
    x = _padded(xp, input, kernel, stride, padding, dilation, out_hw, lowest)
    if not return_indices:
        out = None
        for _, v in _windows(x, kernel, stride, dilation, out_hw):
            out = v.copy() if out is None else xp.maximum(out, v, out=out)
        return out.reshape(out_shape)
    best, index = _max_with_indices(xp, x, tuple(input.shape[-nd:]), kernel, stride, padding, dilation, out_hw,
                                    lowest, floating)
    return best.reshape(out_shape), index.reshape(out_shape)


def _max_pool2d_loop(input, kernel, stride, padding, dilation, out_shape, lowest, return_indices):
    """`max_pool` of a large C-contiguous float numpy input by `pool_loops.max_pool2d_planes`: one pass, the
    same values and indices as the taps' pass (its module says why it exists)."""
    from fxkit.runtime.ops.pool_loops import max_pool2d_planes  # NOTE: numba loads at the first large pool

    h, w = input.shape[-2:]
    planes = math.prod(input.shape[:-2])
    best = np.empty((planes,) + tuple(out_shape[-2:]), input.dtype)
    index = np.empty(best.shape, np.int64)
    max_pool2d_planes(input.reshape(planes, h * w), h, w, best, index, kernel, stride, padding, dilation,
                      input.dtype.type(lowest), bool(np.isnan(input).any()))
    if not return_indices:
        return best.reshape(out_shape)
    return best.reshape(out_shape), index.reshape(out_shape)


@op("max_pool2d", kind="conv", shape_rule=_max_pool_rule("max_pool2d", 2), method=False)
def max_pool2d(xp, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        kernel_size, stride, padding, dilation: an int or a pair; ``stride`` defaults
            to ``kernel_size``; ``padding`` is at most half the kernel and never wins.
        ceil_mode: round the output size up (a last, partial window when it starts inside).
        return_indices: also return, for each output, the flat index into ``H * W`` of the
            input value it took (the first maximum in window order; NaN wins).

    Returns:
        The pooled tensor, or ``(values, indices)`` with ``return_indices``.
    """
    return max_pool(xp, "max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_divisor(size, out, k, s, p, count_include_pad):
    """Per output position along one axis: the window's length inside the padded input, or
    inside the real input without ``count_include_pad`` (PyTorch's ``pool_size``)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _avg_pool_rule(name, nd):
    """The shape rule of the ``nd``-D average pool ``name``."""
    def rule(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        out_shape = _pool_geometry(name, input, kernel_size, stride, padding, 1, ceil_mode, nd)[-1]
        return TensorMeta(out_shape, input.dtype, input.device)
    return rule


def avg_pool(xp, name, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """The ``nd``-D average pool of `avg_pool2d` and `avg_pool3d`, errors reported under ``name``."""
    _, kernel, stride, padding, dilation, out_shape = _pool_geometry(
        name, input, kernel_size, stride, padding, 1, ceil_mode, nd)
    if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override == 0):
        raise ShapeError(f"{name}: divisor_override must be a nonzero integer, got {divisor_override!r}")
    dtype = dtype_of(input)
    if dtype is _dt.bool_:
        raise DTypeError(f"{name}: bool tensors are not supported; cast the input with .float() first")
    if dtype is _dt.bfloat16:
        return run_in_float32(avg_pool, xp, name, nd, input, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)
    out_hw = out_shape[-nd:]
    x = _padded(xp, input, kernel, stride, padding, dilation, out_hw, 0)
    floating = dtype.is_floating_point
    acc = None
    for _, v in _windows(x, kernel, stride, dilation, out_hw):
        if acc is None:
            acc = v.astype(x.dtype if floating else np.int64)
        else:
            acc += v
    if divisor_override is not None:
        divisor = divisor_override
    else:
        per_axis = [_avg_divisor(size, o, k, s, p, count_include_pad)
                    for size, o, k, s, p in zip(input.shape[-nd:], out_hw, kernel, stride, padding)]
        divisor = _outer_product(per_axis)
        first = divisor.flat[0]
        divisor = int(first) if (divisor == first).all() else xp.asarray(divisor.astype(acc.dtype))
    if floating:
        acc /= divisor
        return acc.reshape(out_shape)
    return xp.trunc(acc / divisor).astype(input.dtype).reshape(out_shape)


def _outer_product(per_axis):
    """The products of one entry per axis, as an array with one dim per axis."""
    out = np.ones((), np.int64)
    for values in np.ix_(*per_axis):
        out = out * values
    return out


@op("avg_pool2d", kind="conv", shape_rule=_avg_pool_rule("avg_pool2d", 2), method=False)
def avg_pool2d(xp, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        kernel_size, stride, padding: an int or a pair; ``stride`` defaults to ``kernel_size``.
        ceil_mode: round the output size up (a last, partial window when it starts inside).
        count_include_pad: divide by the window's size including zero padding (PyTorch's
            default) rather than by the number of real input values in it.
        divisor_override: divide every window's sum by this instead.

    Integer inputs average with truncating division, like PyTorch.
    """
    return avg_pool(xp, "avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                    divisor_override)


def adaptive_geometry(x, output_size, name="adaptive_avg_pool2d", nd=2):
    """Check an ``nd``-D adaptive pool's arguments like PyTorch; returns the output shape."""
    check_rank(name, x.shape, nd + 2)
    require_float(name, x)
    if any(isinstance(d, int) and d == 0 for d in x.shape[-nd - 1:]):
        raise ShapeError(f"{name}: expected an input with non-zero sizes outside the batch dimension, "
                         f"got shape {shown(x.shape)}")
    size = ntuple(output_size, nd, name, "output_size")
    size = tuple(d if o is None else o for o, d in zip(size, x.shape[-nd:]))
    if any(isinstance(o, int) and o < 0 for o in size):
        raise ShapeError(f"{name}: output_size must be non-negative, got {output_size!r}")
    return tuple(x.shape[:-nd]) + size


def _adaptive_avg_pool2d_rule(input, output_size):
    return TensorMeta(adaptive_geometry(input, output_size), input.dtype, input.device)


def adaptive_matrix(size, out, dtype):
    """``(out, size)`` averaging matrix: row o averages PyTorch's window
    ``[floor(o * size / out), ceil((o + 1) * size / out))``."""
    start, end = adaptive_bounds(size, out)
    pos = np.arange(size)
    inside = (pos >= start[:, None]) & (pos < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def _global_mean(xp, x):
    """The mean over H and W, kept as 1x1. numpy reduces a short contiguous trailing axis
    slowly (ResNet's 7x7 or 2x2 maps), so contiguous float maps take one matrix-vector
    product with ``1 / (H * W)`` weights instead."""
    h, w = x.shape[-2:]
    item = x.dtype.itemsize
    if item >= 4 and x.strides[-1] == item and x.strides[-2] == w * item:
        weights = xp.full(h * w, 1 / (h * w), x.dtype)
        return xp.matmul(x.reshape(-1, h * w), weights).reshape(x.shape[:-2] + (1, 1))
    return x.mean(axis=(-2, -1), keepdims=True)


@op("adaptive_avg_pool2d", kind="conv", shape_rule=_adaptive_avg_pool2d_rule, method=False)
def adaptive_avg_pool2d(xp, input, output_size):
    """2-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        output_size: an int or a pair ``(OH, OW)``; a None entry keeps that input size.
            Windows may overlap when the sizes do not divide.

    Example:
        >>> fxkit.adaptive_avg_pool2d(fxkit.randn(8, 512, 7, 7), 1).shape
        (8, 512, 1, 1)
    """
    out_shape = adaptive_geometry(input, output_size)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(adaptive_avg_pool2d.impl, xp, input, output_size)
    (h, w), (oh, ow) = input.shape[-2:], out_shape[-2:]
    if oh == 1 and ow == 1:
        return _global_mean(xp, input)
    if oh and ow and h % oh == 0 and w % ow == 0:
        lead = input.shape[:-2]
        return input.reshape(*lead, oh, h // oh, ow, w // ow).mean(axis=(-3, -1))
    rows = xp.asarray(adaptive_matrix(h, oh, input.dtype))
    cols = xp.asarray(adaptive_matrix(w, ow, input.dtype).T)
    return xp.matmul(rows, xp.matmul(input, cols))


def adaptive_bounds(size, out):
    """PyTorch's adaptive windows along one axis: ``(start, end)`` arrays, window o being
    ``[floor(o * size / out), ceil((o + 1) * size / out))``."""
    o = np.arange(out)
    return o * size // out, ((o + 1) * size + out - 1) // out


def _adaptive_max_pool2d_rule(input, output_size, return_indices=False):
    out_shape = adaptive_geometry(input, output_size, "adaptive_max_pool2d")
    values = TensorMeta(out_shape, input.dtype, input.device)
    return (values, TensorMeta(out_shape, _dt.int64, input.device)) if return_indices else values


@op("adaptive_max_pool2d", kind="conv", shape_rule=_adaptive_max_pool2d_rule, method=False)
def adaptive_max_pool2d(xp, input, output_size, return_indices=False):
    """2-D adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        output_size: an int or a pair ``(OH, OW)``; a None entry keeps that input size.
            Windows are adaptive_avg_pool2d's and may overlap when the sizes do not divide.
        return_indices: also return, for each output, the flat index into ``H * W`` of
            the input value it took (the first maximum in row-major window order).

    Example:
        >>> fxkit.adaptive_max_pool2d(fxkit.randn(2, 8, 7, 5), (3, 2)).shape
        (2, 8, 3, 2)
    """
    out_shape = adaptive_geometry(input, output_size, "adaptive_max_pool2d")
    (h, w), (oh, ow) = input.shape[-2:], out_shape[-2:]
    lead = input.shape[:-2]
    if not return_indices:
        # The maximum over a rectangle is the maximum over its rows' maxima: rows, then columns.
        rows = [input[..., s:e, :].max(axis=-2) for s, e in zip(*adaptive_bounds(h, oh))]
        rows = xp.stack(rows, axis=-2) if rows else xp.empty(lead + (0, w), input.dtype)
        cols = [rows[..., s:e].max(axis=-1) for s, e in zip(*adaptive_bounds(w, ow))]
        return xp.stack(cols, axis=-1) if cols else xp.empty(lead + (oh, 0), input.dtype)
    values = xp.empty(out_shape, input.dtype)
    indices = xp.empty(out_shape, np.int64)
    for i, (rs, re) in enumerate(zip(*adaptive_bounds(h, oh))):
        for j, (cs, ce) in enumerate(zip(*adaptive_bounds(w, ow))):
            window = input[..., rs:re, cs:ce].reshape(lead + (-1,))
            k = xp.argmax(window, axis=-1)
            values[..., i, j] = xp.take_along_axis(window, k[..., None], axis=-1)[..., 0]
            indices[..., i, j] = (rs + k // (ce - cs)) * w + cs + k % (ce - cs)
    return values, indices
