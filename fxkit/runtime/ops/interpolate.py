"""interpolate: resizing ``(N, C, L)``, ``(N, C, H, W)`` and ``(N, C, D, H, W)`` inputs as
PyTorch does, by 'nearest', 'nearest-exact', 'linear'/'bilinear'/'trilinear' or 'bicubic'.

Every mode is separable: along each spatial axis an output position reads a
few input positions ("taps") with weights, computed once on the host with
PyTorch's index formulas in the precision PyTorch uses (float32 for float32
and half inputs), so the nearest modes pick exactly PyTorch's pixels. The
data is gathered with ``xp.take`` one axis at a time, last axis first, which
is PyTorch's nesting ``sum_h w_h * (sum_w w_w * x[h, w])``. bfloat16 inputs
are blended in float32 and rounded once (`low_precision.run_in_float32`).
"""
import math

import numpy as np

from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import require_float, shown

# mode: the input rank it needs (None: any of 3, 4, 5)
_MODES = {"nearest": None, "nearest-exact": None, "linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution coefficient


def _per_axis(value, n, what):
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ShapeError(f"interpolate: {what} shape must match input shape; input is {n}D, "
                             f"{what} is {value!r}")
        return tuple(value)
    return (value,) * n


def _scaled_size(size, factor):
    """PyTorch's ``floor(size * scale_factor)``; a symbolic size keeps to ``+ - * //``."""
    if isinstance(size, int):
        return math.floor(float(size) * factor)
    if factor == 1:
        return size
    if float(factor).is_integer():
        return size * int(factor)
    return size * factor // 1


def _geometry(x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias):
    """Check interpolate's arguments like PyTorch; returns ``(out_shape, scales)`` where
    ``scales`` are the factors the index formulas use (None: input size / output size)."""
    rank = len(x.shape)
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode {mode!r} is not supported; use one of {tuple(_MODES)}")
    if rank not in (3, 4, 5):
        raise ShapeError(f"interpolate: expected a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) "
                         f"input, got a {rank}-D input of shape {shown(x.shape)}")
    need = _MODES[mode]
    if need is not None and rank != need:
        raise ShapeError(f"interpolate: got {rank}D input, but {mode} mode needs {need}D input")
    if mode.startswith("nearest") and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise ValueError("interpolate: antialias=True is not supported by fxkit; resize without it, or "
                         "low-pass filter the input first (avg_pool2d) when downsampling")
    if need is not None:
        require_float("interpolate", x)
    spatial = rank - 2
    if size is not None and scale_factor is not None:
        raise ValueError("interpolate: only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("interpolate: recompute_scale_factor is not meaningful with an explicit size")
        out, scales = _per_axis(size, spatial, "size"), (None,) * spatial
    elif scale_factor is not None:
        factors = _per_axis(scale_factor, spatial, "scale_factor")
        out = tuple(_scaled_size(d, f) for d, f in zip(x.shape[2:], factors))
        scales = (None,) * spatial if recompute_scale_factor else factors
    else:
        raise ValueError("interpolate: either size or scale_factor should be defined")
    if any(isinstance(o, int) and o < 1 for o in out):
        raise ShapeError(f"interpolate: input and output sizes should be greater than 0, but got input "
                         f"{shown(x.shape)} and output size {list(out)}")
    return tuple(x.shape[:2]) + tuple(out), scales


def _interpolate_rule(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                      recompute_scale_factor=None, antialias=False):
    out_shape, _ = _geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    return TensorMeta(out_shape, input.dtype, input.device)


def _ratio(in_size, out_size, scale, real):
    """PyTorch's ``compute_scales_value``: 1 / scale_factor when given, else in / out."""
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(in_size) / real(out_size)


def _area_scale(in_size, out_size, scale, align_corners, real):
    """PyTorch's ``area_pixel_compute_scale``."""
    if align_corners:
        return real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0)
    return _ratio(in_size, out_size, scale, real)


def _nearest_taps(in_size, out_size, scale, align_corners, real):
    """PyTorch's ``nearest_idx``: exact for equal and doubled sizes, else ``floor(dst * ratio)`` in float32."""
    dst = np.arange(out_size)
    if out_size == in_size:
        return [(dst, None)]
    if out_size == 2 * in_size:
        return [(dst >> 1, None)]
    ratio = _ratio(in_size, out_size, scale, np.float32)
    return [(np.minimum(np.floor(dst.astype(np.float32) * ratio).astype(np.int64), in_size - 1), None)]


def _nearest_exact_taps(in_size, out_size, scale, align_corners, real):
    """PyTorch's ``nearest_exact_idx``: ``floorf((dst + 0.5) * ratio)``, the product in double,
    rounded to float32 before the floor, as the C++ does."""
    ratio = np.float64(_ratio(in_size, out_size, scale, np.float32))
    src = np.floor(((np.arange(out_size) + 0.5) * ratio).astype(np.float32)).astype(np.int64)
    return [(np.minimum(src, in_size - 1), None)]


def _linear_taps(in_size, out_size, scale, align_corners, real):
    """PyTorch's linear source indices and weights along one axis: ``[(i0, w0), (i1, w1)]``."""
    dst = np.arange(out_size).astype(real)
    ratio = _area_scale(in_size, out_size, scale, align_corners, real)
    src = ratio * dst if align_corners else np.maximum(ratio * (dst + real(0.5)) - real(0.5), real(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    w1 = np.clip(src - i0.astype(real), real(0), real(1))
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    return [(i0, 1 - w1), (i1, w1)]


def _cubic_taps(in_size, out_size, scale, align_corners, real):
    """PyTorch's bicubic taps along one axis: four neighbours ``floor(src) - 1 .. + 2``
    (clamped to the edge) with the cubic convolution weights of ``A = -0.75``; the source
    coordinate is not clamped at 0 as the linear modes' is."""
    dst = np.arange(out_size).astype(real)
    ratio = _area_scale(in_size, out_size, scale, align_corners, real)
    src = ratio * dst if align_corners else ratio * (dst + real(0.5)) - real(0.5)
    base = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - base.astype(real), real(0), real(1))
    a = real(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = (far(t + real(1)), near(t), near(real(1) - t), far(real(2) - t))
    return [(np.clip(base - 1 + k, 0, in_size - 1), w) for k, w in enumerate(weights)]


_TAPS = {"nearest": _nearest_taps, "nearest-exact": _nearest_exact_taps, "linear": _linear_taps,
         "bilinear": _linear_taps, "trilinear": _linear_taps, "bicubic": _cubic_taps}


@op("interpolate", kind="other", shape_rule=_interpolate_rule, method=False)
def interpolate(xp, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize a batch of signals, images or volumes, as ``torch.nn.functional.interpolate``.

    Args:
        input: ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
        size: the output's spatial size (an int for every side); give this or ``scale_factor``.
        scale_factor: a float or one per side; the output size is ``floor(size * scale_factor)``.
        mode: ``'nearest'`` (PyTorch's floor rule), ``'nearest-exact'`` (pixel centres),
            ``'linear'`` (3-D), ``'bilinear'`` or ``'bicubic'`` (4-D), ``'trilinear'`` (5-D).
        align_corners: interpolating modes only; True maps the corner pixels' centres onto each
            other, False (the default behaviour, None) treats pixels as areas.
        recompute_scale_factor: True derives the index ratio from the sizes instead of
            using ``scale_factor`` itself.
        antialias: must be False (PyTorch's default).

    Example:
        >>> fxkit.interpolate(fxkit.randn(1, 3, 8, 8), scale_factor=2, mode="bilinear").shape
        (1, 3, 16, 16)
    """
    out_shape, scales = _geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    if not mode.startswith("nearest") and input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(interpolate.impl, xp, input, size, scale_factor, mode, align_corners,
                              recompute_scale_factor, antialias)
    real = np.float64 if input.dtype == np.float64 else np.float32
    taps_of = _TAPS[mode]
    x = input
    for axis in range(input.ndim - 1, 1, -1):
        in_size, out_size = input.shape[axis], out_shape[axis]
        shape = (-1,) + (1,) * (input.ndim - 1 - axis)
        acc = None
        for index, weight in taps_of(in_size, out_size, scales[axis - 2], align_corners, real):
            picked = xp.take(x, xp.asarray(index), axis=axis)
            if weight is not None:
                picked = picked * xp.asarray(weight.astype(input.dtype)).reshape(shape)
            if acc is None:
                acc = picked
            else:
                acc += picked
        x = acc
    return x
