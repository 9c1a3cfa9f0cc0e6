"""Linear algebra: matmul and friends, on BLAS through numpy/cupy."""
from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op


def _matmul_shape(a_shape, b_shape, name="matmul"):
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise ShapeError(f"{name}: both arguments need at least 1 dimension, got shapes "
                         f"{list(a_shape)} and {list(b_shape)}")
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if str(a2[-1]) != str(b2[-2]):
        left = "x".join(str(d) for d in a2[-2:])
        right = "x".join(str(d) for d in b2[-2:])
        raise ShapeError(f"{name}: mat1 and mat2 shapes cannot be multiplied ({left} and {right})")
    batch = broadcast_shapes(a2[:-2], b2[:-2], op_name=name)
    out = batch + (a2[-2], b2[-1])
    if len(a_shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b_shape) == 1:
        out = out[:-1]
    return out


def _dt_error(name, x, y):
    return DTypeError(f"{name}: expected both inputs to have the same dtype, got "
                      f"{_dt.from_numpy(x).name} and {_dt.from_numpy(y).name}; cast one with .to()")


def _matmul_rule(a, b):
    if a.dtype is not b.dtype:
        raise _dt_error("matmul", a.dtype.np, b.dtype.np)
    return TensorMeta(_matmul_shape(a.shape, b.shape), a.dtype, a.device)


@op("matmul", kind="matmul", shape_rule=_matmul_rule)
def matmul(xp, a, b):
    """Matrix product with numpy's broadcasting of batch dimensions."""
    if a.dtype != b.dtype:
        raise _dt_error("matmul", a.dtype, b.dtype)
    _matmul_shape(a.shape, b.shape)
    return xp.matmul(a, b)
