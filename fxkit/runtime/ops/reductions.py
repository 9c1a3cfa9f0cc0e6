"""Reductions over ``dim`` (an int, a tuple, or None for all) with ``keepdim``."""
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dims, reduced_shape


def _sum_rule(a, dim=None, keepdim=False, dtype=None):
    out = _dt.as_dtype(dtype) or (_dt.int64 if a.dtype.category < 2 else a.dtype)
    return TensorMeta(reduced_shape(a.shape, dim, keepdim, "sum"), out, a.device)


@op("sum", kind="reduction", shape_rule=_sum_rule)
def sum(xp, a, dim=None, keepdim=False, dtype=None):
    """Sum over ``dim``; integer and bool inputs sum to int64 like PyTorch."""
    axes = normalize_dims(dim, a.ndim, "sum")
    out = dtype.np if dtype else (_dt.int64.np if a.dtype.kind in "biu" else a.dtype)
    return xp.sum(a, axis=axes, keepdims=keepdim, dtype=out)
