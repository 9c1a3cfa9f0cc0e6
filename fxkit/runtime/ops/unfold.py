"""``Tensor.unfold(dimension, size, step)``: every window of ``size`` along ``dimension``, ``step`` apart.

The windows take ``dimension``'s place (``(L - size) // step + 1`` of them) and
their elements become a new last dimension, as in PyTorch (timm's halo
attention cuts its key/value blocks this way). PyTorch returns a view; fxkit
copies the windows into a fresh contiguous array, since windows overlap when
``step < size`` and a later in-place write must not reach several of them.
"""
from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import int_arg, normalize_dim
from fxkit.runtime.ops.nn_checks import shown


def window_layout(shape, dimension, size, step):
    """``(axis, windows)``: ``dimension`` made non-negative and the number of windows along it."""
    axis = normalize_dim(dimension, len(shape), "unfold")
    size, step = int_arg(size, "unfold", "size"), int_arg(step, "unfold", "step")
    if step < 1:
        raise ShapeError(f"unfold: step must be positive, got {step}")
    length = shape[axis] if shape else 1
    if size < 0 or (type(length) is int and size > length):
        raise ShapeError(f"unfold: maximum size for the input of shape {shown(shape)} at dimension {axis} is "
                         f"{length} but size is {size}; use a smaller window")
    return axis, (length - size) // step + 1


def _unfold_rule(input, dimension, size, step):  # noqa: A002
    axis, windows = window_layout(input.shape, dimension, size, step)
    shape = tuple(input.shape)
    if not shape:
        return TensorMeta((size,), input.dtype, input.device)
    return TensorMeta(shape[:axis] + (windows,) + shape[axis + 1:] + (size,), input.dtype, input.device)


@op("unfold", kind="other", shape_rule=_unfold_rule)
def unfold(xp, input, dimension, size, step):  # noqa: A002
    """The windows of ``size`` elements along ``dimension``, ``step`` apart, as a new last dimension.

    Example:
        >>> fxkit.arange(5.0).unfold(0, 2, 2)
        tensor([[0., 1.],
                [2., 3.]])
    """
    axis, windows = window_layout(input.shape, dimension, size, step)
    if input.ndim == 0:
        return input.reshape(1)
    view = xp.lib.stride_tricks.sliding_window_view(input, size, axis=axis)
    picked = view[(slice(None),) * axis + (slice(None, (windows - 1) * step + 1 if windows else 0, step),)]
    return xp.ascontiguousarray(picked)
