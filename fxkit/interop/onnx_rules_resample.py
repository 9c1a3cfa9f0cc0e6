"""ONNX export rules of the resampling ops: adaptive_avg_pool2d/3d, adaptive_max_pool2d
and interpolate (``Resize``).

Adaptive pools to 1x1 are the global pools and whole-multiple sizes plain
pools. Other sizes have overlapping windows of differing lengths, which no
ONNX pool expresses; both pools are separable, so averaging becomes two
``MatMul`` with constant window matrices (``R @ x @ C``) and the maximum a
``ReduceMax`` per window of rows, then per window of columns.

interpolate's modes map onto ``Resize`` attributes; ``scale_factor`` goes in
as ``scales`` (ONNX then uses the factor itself in its coordinate formula, as
PyTorch does), a ``size`` as ``sizes``.
"""
import numpy as np

from fxkit.interop.onnx_rules import concrete, export_rule, unsupported
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.ops.pooling import adaptive_matrix, adaptive_bounds


def _adaptive_sizes(op, a, out, n=2):
    size_in = concrete(op, "input size", tuple(a.input.meta.shape[-n:]))
    size_out = concrete(op, "output size", tuple(out.shape[-n:]))
    return size_in, size_out


@export_rule("adaptive_avg_pool2d", "adaptive_avg_pool3d")
def _adaptive_avg_pool(b, op, a, out):
    n = int(op.name[-2])
    if tuple(out.shape[-n:]) == (1,) * n:
        return b.op("GlobalAveragePool", a.input.name)
    size_in, size_out = _adaptive_sizes(op, a, out, n)
    if not any(i % o for i, o in zip(size_in, size_out)):
        kernel = [i // o for i, o in zip(size_in, size_out)]
        return b.op("AveragePool", a.input.name, kernel_shape=kernel, strides=kernel)
    dtype = out.dtype
    if n == 2:
        rows = b.const(adaptive_matrix(size_in[0], size_out[0], np.float64), dtype)
        cols = b.const(adaptive_matrix(size_in[1], size_out[1], np.float64).T, dtype)
        return b.op("MatMul", rows, b.op("MatMul", a.input.name, cols))
    # 3-D: each axis's window matrix in turn, contracted with Einsum on that axis
    x = a.input.name
    for axis, (i, o) in enumerate(zip(size_in, size_out)):
        if i != o:
            letters = "xyz"
            spec = letters.replace(letters[axis], "o")
            x = b.op("Einsum", b.const(adaptive_matrix(i, o, np.float64), dtype), x,
                     equation=f"o{letters[axis]},nc{letters}->nc{spec}")
    return x


@export_rule("adaptive_max_pool2d")
def _adaptive_max_pool(b, op, a, out):
    if a.return_indices:
        raise unsupported(op, "return_indices=True", "pool without indices for export")
    if tuple(out.shape[-2:]) == (1, 1):
        return b.op("GlobalMaxPool", a.input.name)
    size_in, size_out = _adaptive_sizes(op, a, out)
    if not any(i % o for i, o in zip(size_in, size_out)):
        kernel = [i // o for i, o in zip(size_in, size_out)]
        return b.op("MaxPool", a.input.name, kernel_shape=kernel, strides=kernel)
    x = a.input.name
    for axis, (n, m) in zip((-2, -1), zip(size_in, size_out)):
        windows = [b.op("Slice", x, b.ints([int(s)]), b.ints([int(e)]), b.ints([axis]))
                   for s, e in zip(*adaptive_bounds(n, m))]
        parts = [b.reduce("ReduceMax", w, [axis], True) for w in windows]
        x = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=axis)
    return x


# mode -> (ONNX mode, coordinate_transformation_mode without align_corners, extra attributes)
_RESIZE = {
    "nearest": ("nearest", "asymmetric", {"nearest_mode": "floor"}),
    "nearest-exact": ("nearest", "half_pixel", {"nearest_mode": "round_prefer_ceil"}),
    "linear": ("linear", "half_pixel", {}),
    "bilinear": ("linear", "half_pixel", {}),
    "trilinear": ("linear", "half_pixel", {}),
    "bicubic": ("cubic", "half_pixel", {"cubic_coeff_a": -0.75, "exclude_outside": 0}),
}


@export_rule("interpolate")
def _interpolate(b, op, a, out):
    mode, transform, extra = _RESIZE[a.mode]
    if a.align_corners:
        transform = "align_corners"
    spatial = len(out.shape) - 2
    if a.scale_factor is not None and not a.recompute_scale_factor:
        factors = a.scale_factor if isinstance(a.scale_factor, (tuple, list)) else [a.scale_factor] * spatial
        scales = b.const([1.0, 1.0] + [float(f) for f in factors], _dt.float32)
        return b.op("Resize", a.input.name, None, scales, mode=mode, coordinate_transformation_mode=transform,
                    **extra)
    return b.op("Resize", a.input.name, None, None, b.ints(out.shape), mode=mode,
                coordinate_transformation_mode=transform, **extra)
