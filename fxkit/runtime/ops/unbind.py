"""unbind, swapaxes and swapdims: PyTorch's other spellings of taking a tensor apart
along a dimension and of swapping two dimensions.

``swapaxes``/``swapdims`` are their own ops rather than names for ``transpose``:
the registry maps one name to one `Op`, and PyTorch gives them their own
parameter names (``axis0``/``dim0``), which keyword calls use.
"""
from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dim


def _unbind_dim(shape, dim):
    if not shape:
        raise ShapeError("unbind: dimension specified as 0 but tensor has no dimensions; "
                         "a 0-d tensor has nothing to unbind")
    d = normalize_dim(dim, len(shape), "unbind")
    if type(shape[d]) is not int:
        raise ShapeError(f"unbind: dimension {d} has symbolic size {shape[d]}; the number of results must be "
                         f"known; index the slices one by one (x[:, i]) instead")
    return d


def _unbind_rule(input, dim=0):  # noqa: A002
    shape = tuple(input.shape)
    d = _unbind_dim(shape, dim)
    piece = shape[:d] + shape[d + 1:]
    return tuple(TensorMeta(piece, input.dtype, input.device) for _ in range(shape[d]))


@op("unbind", kind="view", shape_rule=_unbind_rule)
def unbind(xp, input, dim=0):  # noqa: A002
    """A tuple of the views ``a.select(dim, i)`` for every ``i``: ``dim`` removed.

    Example:
        >>> q, k, v = fxkit.randn(3, 2, 8).unbind(0)
    """
    d = _unbind_dim(input.shape, dim)
    head = (slice(None),) * d
    return tuple(input[head + (i,)] for i in range(input.shape[d]))


def _swap_shape(name, a, d0, d1):
    shape = list(a.shape)
    d0, d1 = normalize_dim(d0, len(shape), name), normalize_dim(d1, len(shape), name)
    if shape:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorMeta(tuple(shape), a.dtype, a.device)


def _swap(xp, name, a, d0, d1):
    d0, d1 = normalize_dim(d0, a.ndim, name), normalize_dim(d1, a.ndim, name)
    return a if d0 == d1 else xp.swapaxes(a, d0, d1)


@op("swapaxes", kind="view", shape_rule=lambda input, axis0, axis1: _swap_shape("swapaxes", input, axis0, axis1))
def swapaxes(xp, input, axis0, axis1):  # noqa: A002
    """Dimensions ``axis0`` and ``axis1`` swapped (numpy's name for ``transpose``)."""
    return _swap(xp, "swapaxes", input, axis0, axis1)


@op("swapdims", kind="view", shape_rule=lambda input, dim0, dim1: _swap_shape("swapdims", input, dim0, dim1))
def swapdims(xp, input, dim0, dim1):  # noqa: A002
    """Dimensions ``dim0`` and ``dim1`` swapped (another name for ``transpose``)."""
    return _swap(xp, "swapdims", input, dim0, dim1)
