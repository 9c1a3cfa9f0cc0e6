"""Dimension arguments shared by reductions, shape ops and their shape rules."""
import numbers
import operator

from fxkit.errors import DTypeError, IndexOutOfRangeError


def normalize_dim(dim, ndim, op_name):
    """A possibly negative ``dim`` as an index in ``range(ndim)``; 0-d tensors accept 0 and -1."""
    if type(dim) is not int:
        dim = int_arg(dim, op_name, "dim")
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexOutOfRangeError(
            f"{op_name}: dimension out of range (expected to be in range of "
            f"[{-bound}, {bound - 1}], but got {dim})"
        )
    return dim % bound if ndim else 0


def int_arg(value, op_name, what):
    """``value`` as an int (numpy integers and one-element int tensors too); floats, strings
    and None are refused, never truncated."""
    try:
        return operator.index(value)
    except TypeError:
        raise DTypeError(f"{op_name}: {what} must be an int, got {type(value).__name__} {value!r}") from None


def normalize_dims(dim, ndim, op_name):
    """``dim`` (None, an int, or a sequence) as a tuple of axes, or None for all axes.

    An empty sequence also means all axes: PyTorch's reductions read
    ``x.sum(dim=())`` as a full reduction.
    """
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        if not dim:
            return None
        axes = tuple(normalize_dim(d, ndim, op_name) for d in dim)
        if len(set(axes)) != len(axes):
            raise IndexOutOfRangeError(f"{op_name}: dim {tuple(dim)} names a dimension twice")
        return axes if ndim else None
    axis = normalize_dim(dim, ndim, op_name)
    return (axis,) if ndim else None


def single_dim(dim, ndim, op_name, several=None):
    """``dim`` that must be one int (``max``, ``cumsum``, ``softmax``), normalised.

    ``several`` names the op to use instead when a caller passes a tuple.
    """
    if not isinstance(dim, numbers.Integral):
        hint = f"; use {several} to reduce several dims" if several else ""
        raise DTypeError(f"{op_name}: dim must be an int, got {dim!r}{hint}")
    return normalize_dim(dim, ndim, op_name)


def reduced_shape(shape, dim, keepdim, op_name):
    """The shape left after reducing ``dim`` of ``shape``."""
    axes = normalize_dims(dim, len(shape), op_name)
    if axes is None:
        return tuple(1 for _ in shape) if keepdim else ()
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)
