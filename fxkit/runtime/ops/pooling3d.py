"""3-D pooling: ``max_pool3d``, ``avg_pool3d`` and ``adaptive_avg_pool3d``, as in PyTorch (video models).

The window pools are `pooling`'s N-d ``max_pool`` and ``avg_pool`` over three
spatial dims: the same tap loop, ceil mode, padding rules and PyTorch's max
indices (flat into ``D * H * W``). The adaptive average is separable: one
window-averaging matrix per axis (`adaptive_matrix`), applied axis by axis.
"""
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.pooling import (_avg_pool_rule, _max_pool_rule, adaptive_geometry, adaptive_matrix, avg_pool,
                                       max_pool)


@op("max_pool3d", kind="conv", shape_rule=_max_pool_rule("max_pool3d", 3), method=False)
def max_pool3d(xp, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-D max pooling, as ``torch.nn.functional.max_pool3d``.

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        kernel_size, stride, padding, dilation, ceil_mode: as in `max_pool2d`, with triples.
        return_indices: also return, for each output, the flat index into ``D * H * W`` of the
            input value it took.

    Example:
        >>> fxkit.max_pool3d(fxkit.randn(1, 2, 4, 8, 8), 2).shape
        (1, 2, 2, 4, 4)
    """
    return max_pool(xp, "max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@op("avg_pool3d", kind="conv", shape_rule=_avg_pool_rule("avg_pool3d", 3), method=False)
def avg_pool3d(xp, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-D average pooling, as ``torch.nn.functional.avg_pool3d``.

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: as in
            `avg_pool2d`, with triples.
    """
    return avg_pool(xp, "avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                    divisor_override)


def _adaptive_avg_pool3d_rule(input, output_size):
    return TensorMeta(adaptive_geometry(input, output_size, "adaptive_avg_pool3d", 3), input.dtype, input.device)


@op("adaptive_avg_pool3d", kind="conv", shape_rule=_adaptive_avg_pool3d_rule, method=False)
def adaptive_avg_pool3d(xp, input, output_size):
    """3-D adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool3d``.

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        output_size: an int or a triple ``(OD, OH, OW)``; a None entry keeps that input size.

    Example:
        >>> fxkit.adaptive_avg_pool3d(fxkit.randn(2, 512, 1, 4, 4), 1).shape
        (2, 512, 1, 1, 1)
    """
    out_shape = adaptive_geometry(input, output_size, "adaptive_avg_pool3d", 3)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(adaptive_avg_pool3d.impl, xp, input, output_size)
    if all(o == 1 for o in out_shape[-3:]):
        return input.mean(axis=(-3, -2, -1), keepdims=True)
    x = input
    for axis, (size, out) in enumerate(zip(input.shape[-3:], out_shape[-3:]), start=input.ndim - 3):
        if size != out:
            window = xp.asarray(adaptive_matrix(size, out, input.dtype))
            x = xp.moveaxis(xp.matmul(window, xp.moveaxis(x, axis, -2)), -2, axis)
    return xp.ascontiguousarray(x)
