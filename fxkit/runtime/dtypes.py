"""fxkit dtypes and PyTorch's type-promotion rules.

numpy promotes ``int32 + 1.5`` to float64 and ``float32 + int64`` to float64;
PyTorch keeps both float32. fxkit follows PyTorch so that models never take a
silent float64 detour: the result dtype of an elementwise op is computed here
(`result_type`) and the inputs are cast to it before numpy or cupy runs.
"""
import numpy as np

from fxkit.errors import DTypeError

_BOOL, _INT, _FLOAT = 0, 1, 2


class DType:
    """A tensor element type: a thin name over a numpy dtype.

    Example:
        >>> fxkit.float32.itemsize
        4
    """

    __slots__ = ("name", "np", "category", "itemsize", "is_floating_point", "is_signed")

    def __init__(self, name, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)
        kind = self.np.kind
        self.category = _BOOL if kind == "b" else (_FLOAT if kind == "f" or name == "bfloat16" else _INT)
        self.itemsize = self.np.itemsize
        self.is_floating_point = self.category == _FLOAT
        self.is_signed = kind in "fi" or name == "bfloat16"

    def __repr__(self):
        return f"fxkit.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


float16 = DType("float16", np.float16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int8 = DType("int8", np.int8)
uint8 = DType("uint8", np.uint8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
bool_ = DType("bool", np.bool_)

_ALL = [float16, float32, float64, int8, uint8, int16, int32, int64, bool_]
try:  # bfloat16 exists only where the ml_dtypes package is installed
    import ml_dtypes as _ml_dtypes

    bfloat16 = DType("bfloat16", _ml_dtypes.bfloat16)
    _ALL.append(bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    bfloat16 = None

_BY_NP = {d.np: d for d in _ALL}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32})
default_float = float32
default_int = int64


def from_name(name):
    """The dtype called ``name`` ("float32", "int64", "half", ...)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown dtype name {name!r}; expected one of {sorted(_BY_NAME)}") from None


def from_numpy(np_dtype):
    """The fxkit dtype of a numpy dtype; a clear error for unsupported ones."""
    try:
        return _BY_NP[np_dtype]
    except KeyError:
        pass
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except (KeyError, TypeError):
        raise DTypeError(
            f"numpy dtype {np_dtype} has no fxkit equivalent; "
            f"supported: {', '.join(d.name for d in _ALL)}"
        ) from None


def as_dtype(value):
    """Accept an fxkit dtype, a numpy dtype or scalar type, a name, or a Python type."""
    if value is None or isinstance(value, DType):
        return value
    if value is float:
        return default_float
    if value is int:
        return default_int
    if value is bool:
        return bool_
    if isinstance(value, str):
        return from_name(value)
    return from_numpy(value)


def promote_types(a, b):
    """PyTorch's promotion of two dtypes (``torch.promote_types``)."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == _FLOAT and (a.name == "bfloat16" or b.name == "bfloat16"):
        return float32 if {a.name, b.name} == {"bfloat16", "float16"} else (b if a.name == "bfloat16" else a)
    return _BY_NP[np.promote_types(a.np, b.np)]


def scalar_dtype(value):
    """The dtype PyTorch gives a Python number taking part in an op."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return default_int
    if isinstance(value, float):
        return default_float
    if isinstance(value, np.generic):
        return from_numpy(value.dtype)
    raise DTypeError(f"expected a tensor or a Python number, got {type(value).__name__}")


def _combine(higher, lower):
    # PyTorch's combine_categories: a lower-priority operand only matters when
    # it is of a higher category (a float scalar with an int tensor).
    if higher is None:
        return lower
    if lower is None or higher.category == _FLOAT:
        return higher
    if higher.category == _BOOL or lower.category == _FLOAT:
        return promote_types(higher, lower) if lower.category > higher.category else higher
    return higher


def result_type(tensor_dtypes, zero_dim_dtypes=(), scalars=()):
    """Result dtype of an op over tensors (n-d and 0-d) and Python scalars.

    Follows ``torch.result_type``: dimensioned tensors decide within their
    category; 0-d tensors and Python numbers can only raise the category.

    >>> result_type([int32], scalars=[1.5])
    fxkit.float32
    """
    dim = None
    for d in tensor_dtypes:
        dim = d if dim is None else promote_types(dim, d)
    zero = None
    for d in zero_dim_dtypes:
        zero = d if zero is None else promote_types(zero, d)
    wrapped = None
    for s in scalars:
        d = scalar_dtype(s)
        wrapped = d if wrapped is None else promote_types(wrapped, d)
    return _combine(dim, _combine(zero, wrapped))
