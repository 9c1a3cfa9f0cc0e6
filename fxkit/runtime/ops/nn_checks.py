"""Argument checks shared by the nn op families (norms, losses, dropout, embedding).

Each check takes arrays or `TensorMeta` alike (both have ``shape`` and
``dtype``), so an op's implementation and its shape rule run the same check
and raise the same error. Dimensions may be symbolic in shape rules: only
two known (int) sizes can disagree.
"""
import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt


def dtype_of(x):
    """The fxkit dtype of an array or a `TensorMeta`."""
    dtype = x.dtype
    return dtype if isinstance(dtype, _dt.DType) else _dt.from_numpy(dtype)


def require_float(name, x, what="input"):
    """Refuse integer and bool tensors where PyTorch only implements floating types."""
    dtype = dtype_of(x)
    if not dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating-point {what}, got {dtype.name}; "
                         f"cast it first, e.g. {what}.float()")


def require_integer(name, x, what):
    """Refuse float and bool tensors where indices or class labels are expected."""
    dtype = dtype_of(x)
    if dtype.category != 1:
        raise DTypeError(f"{name}: expected an integer (int64) {what}, got {dtype.name}; "
                         f"cast it first, e.g. {what}.long()")


def dims_differ(a, b):
    """True when two dimensions are known to differ (symbolic ones may be equal)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def shapes_differ(a, b):
    """True when two shapes are known to differ."""
    return len(a) != len(b) or any(dims_differ(x, y) for x, y in zip(a, b))


def shown(shape):
    """``[2, 3]``: a shape as error messages print it (symbolic dims by name)."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_probability(name, p):
    """PyTorch's bound on dropout probabilities."""
    if not 0 <= p <= 1:
        raise ShapeError(f"{name}: dropout probability has to be between 0 and 1, but got {p}")


def stat_dtype(x):
    """The dtype statistics (mean, variance) accumulate in: float32 for half types."""
    return np.float32 if x.dtype.itemsize < 4 else x.dtype
