"""interpolate: resizing ``(N, C, H, W)`` images by 'nearest' or 'bilinear', as PyTorch does.

Both modes are separable: the source rows (and their blend weights) are
computed once per axis on the host with PyTorch's index formulas, in the
precision PyTorch uses (float32 for float32 and half inputs), so 'nearest'
picks exactly the same pixels; the data is then gathered with ``xp.take``
along one axis at a time. bfloat16 images are blended in float32 and rounded
once, as PyTorch does (`low_precision.run_in_float32`).
"""
import math

import numpy as np

from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import require_float, shown

_MODES = ("nearest", "bilinear")


def _pair(value, what):
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ShapeError(f"interpolate: {what} shape must match input shape; input is 2D, {what} is {value!r}")
        return tuple(value)
    return (value, value)


def _scaled_size(size, factor):
    """PyTorch's ``floor(size * scale_factor)``; a symbolic size keeps to ``+ - * //``."""
    if isinstance(size, int):
        return math.floor(float(size) * factor)
    if factor == 1:
        return size
    if float(factor).is_integer():
        return size * int(factor)
    return size * factor // 1


def _geometry(x, size, scale_factor, mode, align_corners, recompute_scale_factor):
    """Check interpolate's arguments like PyTorch; returns ``(out_shape, scales)`` where
    ``scales`` are the factors the index formulas use (None: input size / output size)."""
    if len(x.shape) != 4:
        raise ShapeError(f"interpolate: expected a 4-D (N, C, H, W) input (fxkit resizes 2-D images only), "
                         f"got a {len(x.shape)}-D input of shape {shown(x.shape)}")
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode {mode!r} is not supported; use one of {_MODES}")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if mode == "bilinear":
        require_float("interpolate", x)
    if size is not None and scale_factor is not None:
        raise ValueError("interpolate: only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("interpolate: recompute_scale_factor is not meaningful with an explicit size")
        out, scales = _pair(size, "size"), (None, None)
    elif scale_factor is not None:
        factors = _pair(scale_factor, "scale_factor")
        out = tuple(_scaled_size(d, f) for d, f in zip(x.shape[2:], factors))
        scales = (None, None) if recompute_scale_factor else factors
    else:
        raise ValueError("interpolate: either size or scale_factor should be defined")
    if any(isinstance(o, int) and o < 1 for o in out):
        raise ShapeError(f"interpolate: input and output sizes should be greater than 0, but got input "
                         f"{shown(x.shape)} and output size {list(out)}")
    return tuple(x.shape[:2]) + out, scales


def _interpolate_rule(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                      recompute_scale_factor=None):
    out_shape, _ = _geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return TensorMeta(out_shape, input.dtype, input.device)


def _ratio(in_size, out_size, scale, real):
    """PyTorch's ``compute_scales_value``: 1 / scale_factor when given, else in / out."""
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(in_size) / real(out_size)


def _nearest_source(in_size, out_size, scale):
    """PyTorch's ``nearest_idx``: exact for equal and doubled sizes, else ``floor(dst * ratio)`` in float32."""
    dst = np.arange(out_size)
    if out_size == in_size:
        return dst
    if out_size == 2 * in_size:
        return dst >> 1
    ratio = _ratio(in_size, out_size, scale, np.float32)
    return np.minimum(np.floor(dst.astype(np.float32) * ratio).astype(np.int64), in_size - 1)


def _linear_taps(in_size, out_size, scale, align_corners, real):
    """PyTorch's linear source indices and weights along one axis: ``(i0, i1, w0, w1)``."""
    dst = np.arange(out_size).astype(real)
    if align_corners:
        ratio = real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0)
        src = ratio * dst
    else:
        ratio = _ratio(in_size, out_size, scale, real)
        src = np.maximum(ratio * (dst + real(0.5)) - real(0.5), real(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    w1 = np.clip(src - i0.astype(real), real(0), real(1))
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    return i0, i1, 1 - w1, w1


@op("interpolate", kind="other", shape_rule=_interpolate_rule, method=False)
def interpolate(xp, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """Resize a batch of images, as ``torch.nn.functional.interpolate``.

    Args:
        input: ``(N, C, H, W)``.
        size: the output ``(H, W)`` (an int for both); give this or ``scale_factor``.
        scale_factor: a float or a pair; the output size is ``floor(size * scale_factor)``.
        mode: ``'nearest'`` (PyTorch's floor rule, not 'nearest-exact') or ``'bilinear'``.
        align_corners: bilinear only; True maps the corner pixels' centres onto each other,
            False (the default behaviour, None) treats pixels as areas.
        recompute_scale_factor: True derives the index ratio from the sizes instead of
            using ``scale_factor`` itself.

    Example:
        >>> fxkit.interpolate(fxkit.randn(1, 3, 8, 8), scale_factor=2, mode="bilinear").shape
        (1, 3, 16, 16)
    """
    out_shape, scales = _geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    (h, w), (oh, ow) = input.shape[2:], out_shape[2:]
    if mode == "nearest":
        rows = xp.asarray(_nearest_source(h, oh, scales[0]))
        cols = xp.asarray(_nearest_source(w, ow, scales[1]))
        return xp.take(xp.take(input, rows, axis=2), cols, axis=3)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(interpolate.impl, xp, input, size, scale_factor, mode, align_corners,
                              recompute_scale_factor)
    real = np.float64 if input.dtype == np.float64 else np.float32
    c0, c1, cw0, cw1 = (xp.asarray(a) for a in _linear_taps(w, ow, scales[1], align_corners, real))
    r0, r1, rw0, rw1 = (xp.asarray(a) for a in _linear_taps(h, oh, scales[0], align_corners, real))
    dtype = input.dtype
    # Blend columns, then rows: PyTorch's nesting h0 * (w0 * x00 + w1 * x01) + h1 * (...).
    blended = xp.take(input, c0, axis=3) * cw0.astype(dtype) + xp.take(input, c1, axis=3) * cw1.astype(dtype)
    rw0, rw1 = rw0.astype(dtype)[:, None], rw1.astype(dtype)[:, None]
    return xp.take(blended, r0, axis=2) * rw0 + xp.take(blended, r1, axis=2) * rw1
