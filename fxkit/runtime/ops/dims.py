"""Dimension arguments shared by reductions, shape ops and their shape rules."""
from fxkit.errors import IndexOutOfRangeError


def normalize_dim(dim, ndim, op_name):
    """A possibly negative ``dim`` as an index in ``range(ndim)``; 0-d tensors accept 0 and -1."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexOutOfRangeError(
            f"{op_name}: dimension out of range (expected to be in range of "
            f"[{-bound}, {bound - 1}], but got {dim})"
        )
    return dim % bound if ndim else 0


def normalize_dims(dim, ndim, op_name):
    """``dim`` (None, an int, or a sequence) as a tuple of axes, or None for all axes."""
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        axes = tuple(normalize_dim(d, ndim, op_name) for d in dim)
        if len(set(axes)) != len(axes):
            raise IndexOutOfRangeError(f"{op_name}: dim {tuple(dim)} names a dimension twice")
        return axes if ndim else None
    return (normalize_dim(dim, ndim, op_name),) if ndim else None


def reduced_shape(shape, dim, keepdim, op_name):
    """The shape left after reducing ``dim`` of ``shape``."""
    axes = normalize_dims(dim, len(shape), op_name)
    if axes is None:
        return tuple(1 for _ in shape) if keepdim else ()
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)
