"""Type and device casts: ``to``, ``float``, ``double``, ``half``, ``int``, ``long``, ``bool``."""
from fxkit.errors import DTypeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import Device
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.tensor import Tensor


def _split_to_args(args, dtype, device):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` and ``to(other_tensor)``."""
    for a in args:
        if isinstance(a, (TensorMeta, Tensor)):
            dtype, device = dtype or a.dtype, device or a.device
        elif isinstance(a, (_dt.DType, type)) or (isinstance(a, str) and a in _dt._BY_NAME):
            dtype = a
        elif isinstance(a, (str, Device)):
            device = a
        elif a is not None and hasattr(a, "dtype") and hasattr(a, "shape"):
            dtype = _dt.from_numpy(a.dtype)
        else:
            raise DTypeError(f"to(): expected a dtype, a device or a tensor, got {a!r}")
    return _dt.as_dtype(dtype), (Device(device) if device is not None else None)


def _to_rule(input, *args, dtype=None, device=None, copy=False, non_blocking=False):  # noqa: A002
    dtype, device = _split_to_args(args, dtype, device)
    return TensorMeta(input.shape, dtype or input.dtype, device or input.device)


@op("to", kind="other", shape_rule=_to_rule)
def to(xp, input, *args, dtype=None, device=None, copy=False, non_blocking=False):  # noqa: A002
    """Cast to a dtype and/or move to a device; returns the input itself when nothing changes."""
    dtype, target = _split_to_args(args, dtype, device)
    if dtype is not None and input.dtype != dtype.np:
        input = input.astype(dtype.np)
    elif copy:
        input = input.copy()
    if target is None:
        return input
    here = Device("cpu") if xp.__name__ == "numpy" else Device(f"cuda:{input.device.id}")
    if target is here:
        return input
    if target.type == "cpu":
        return Tensor._make(input.get(), target)
    with target.activate():
        return Tensor._make(target.xp.asarray(input), target)


def _cast(name, dtype):
    def rule(input):  # noqa: A002
        return TensorMeta(input.shape, dtype, input.device)

    def impl(xp, input):  # noqa: A002
        return input if input.dtype == dtype.np else input.astype(dtype.np)

    impl.__doc__ = f"``x.{name}()``: cast to {dtype.name}."
    return op(name, kind="other", shape_rule=rule)(impl)


float = _cast("float", _dt.float32)  # noqa: A001
double = _cast("double", _dt.float64)
half = _cast("half", _dt.float16)
int = _cast("int", _dt.int32)  # noqa: A001
long = _cast("long", _dt.int64)
bool = _cast("bool", _dt.bool_)  # noqa: A001
