"""How error messages and printed graphs spell values: ``f32[3, 4]`` for a float32 tensor.

One spelling for the op dispatcher's errors, the graph printer and the compiled
modules' guards, so a shape in an error reads as it does in ``print(graph)``.
"""
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.tensor import Tensor


def describe(value):
    """A short description of an argument for error messages: ``f32[3, 4]``."""
    if isinstance(value, Tensor):
        return f"{short_dtype(value.dtype)}{list(value.shape)}"
    if isinstance(value, TensorMeta):
        return f"{short_dtype(value.dtype)}{list(value.shape)}"
    if type(value) in (list, tuple):
        inner = ", ".join(describe(v) for v in value[:4])
        return f"[{inner}{', ...' if len(value) > 4 else ''}]"
    return repr(value)


_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16", "int8": "i8",
          "uint8": "u8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "b8"}


def short_dtype(dtype):
    """``f32`` for float32, as graphs print dtypes."""
    return _SHORT.get(dtype.name, dtype.name)
