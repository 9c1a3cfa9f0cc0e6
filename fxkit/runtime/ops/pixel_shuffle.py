"""Sub-pixel rearrangement: ``pixel_shuffle`` (channels into space) and ``pixel_unshuffle`` (back).

``pixel_shuffle(x, r)`` turns ``(*, C * r * r, H, W)`` into ``(*, C, H * r, W * r)``:
output pixel ``(c, h * r + i, w * r + j)`` is input ``(c * r * r + i * r + j, h, w)``,
as in PyTorch (and ONNX's DepthToSpace in ``CRD`` mode). ``pixel_unshuffle`` is its
inverse. Both are one reshape, one transpose and one copy; the copy keeps the
result contiguous, as PyTorch's.
"""
from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import int_arg
from fxkit.runtime.ops.nn_checks import shown


def _factor(name, what, value):
    value = int_arg(value, name, what)
    if value < 1:
        raise ShapeError(f"{name}: {what} must be positive, got {value}")
    return value


def _divisible(size, by):
    """False only when ``size`` is a known int that ``by`` does not divide (a symbolic size is trusted)."""
    return type(size) is not int or size % by == 0


def _shuffled_shape(name, shape, factor):
    if len(shape) < 3:
        raise ShapeError(f"{name}: expected a tensor of at least 3 dims (*, C, H, W), got shape {shown(shape)}")
    *lead, c, h, w = shape
    if name == "pixel_shuffle":
        if not _divisible(c, factor * factor):
            raise ShapeError(f"{name}: the channel count {c} of the input of shape {shown(shape)} is not divisible "
                             f"by upscale_factor ** 2 = {factor * factor}")
        return (*lead, c // (factor * factor), h * factor, w * factor)
    for size, what in ((h, "height"), (w, "width")):
        if not _divisible(size, factor):
            raise ShapeError(f"{name}: the {what} {size} of the input of shape {shown(shape)} is not divisible "
                             f"by downscale_factor = {factor}")
    return (*lead, c * factor * factor, h // factor, w // factor)


def _pixel_shuffle_rule(input, upscale_factor):  # noqa: A002
    factor = _factor("pixel_shuffle", "upscale_factor", upscale_factor)
    return TensorMeta(_shuffled_shape("pixel_shuffle", input.shape, factor), input.dtype, input.device)


@op("pixel_shuffle", kind="other", shape_rule=_pixel_shuffle_rule, method=False)
def pixel_shuffle(xp, input, upscale_factor):  # noqa: A002
    """``(*, C * r * r, H, W)`` -> ``(*, C, H * r, W * r)``, as ``torch.nn.functional.pixel_shuffle``.

    Example:
        >>> F.pixel_shuffle(fxkit.arange(8.0).reshape(1, 4, 1, 2), 2).shape
        (1, 1, 2, 4)
    """
    r = _factor("pixel_shuffle", "upscale_factor", upscale_factor)
    out_shape = _shuffled_shape("pixel_shuffle", input.shape, r)
    *lead, c, h, w = input.shape
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    order = (*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return xp.ascontiguousarray(x.transpose(order)).reshape(out_shape)


def _pixel_unshuffle_rule(input, downscale_factor):  # noqa: A002
    factor = _factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    return TensorMeta(_shuffled_shape("pixel_unshuffle", input.shape, factor), input.dtype, input.device)


@op("pixel_unshuffle", kind="other", shape_rule=_pixel_unshuffle_rule, method=False)
def pixel_unshuffle(xp, input, downscale_factor):  # noqa: A002
    """``(*, C, H * r, W * r)`` -> ``(*, C * r * r, H, W)``: the inverse of `pixel_shuffle`.

    Example:
        >>> F.pixel_unshuffle(fxkit.arange(8.0).reshape(1, 1, 2, 4), 2).shape
        (1, 4, 1, 2)
    """
    r = _factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    out_shape = _shuffled_shape("pixel_unshuffle", input.shape, r)
    *lead, c, h, w = input.shape
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    order = (*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return xp.ascontiguousarray(x.transpose(order)).reshape(out_shape)
