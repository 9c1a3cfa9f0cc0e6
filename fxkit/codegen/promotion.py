"""The input casts `Op.run` applies before an op's implementation, decided ahead of time.

Eager mode casts the array inputs of an elementwise op to PyTorch's result
dtype on every call. Generated code knows every input's dtype when it is
generated, so it writes the casts out (``x.astype(float32)``) only where they
happen, and calls the implementation (or the numpy ufunc) directly. The rule
is `Op._promote_inputs`' and must stay in step with it.

Example:
    >>> input_casts(fxkit.ops.add, (TensorMeta((3,), fxkit.int32), 1.5))
    {0: fxkit.float32}
"""
from fxkit.errors import DTypeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta

_SCALARS = (int, float, bool)
_NO_CAST_MODES = (None, "bool", "keep")


def input_casts(op, args):
    """``{position: DType}`` of the positional inputs ``op`` casts before its impl runs.

    Args:
        op: a registry `Op`.
        args: its positional arguments, with a `TensorMeta` for each tensor.

    Returns:
        The positions whose tensor is cast and the dtype each becomes (empty
        when the op promotes nothing or the dtypes already agree).

    Raises:
        DTypeError: an integer-only op given floating tensors (as eager raises).
    """
    mode = op.promote
    if mode in _NO_CAST_MODES:
        return {}
    start = op.promote_from
    promoted = args[start:]
    tensors = [a for a in promoted if isinstance(a, TensorMeta)]
    if not tensors:
        return {}
    scalars = [a for a in promoted if type(a) in _SCALARS]
    first = tensors[0].dtype
    if not scalars and all(t.dtype is first for t in tensors):
        target = first
    else:
        dims = [t.dtype for t in tensors if t.shape]
        zeros = [t.dtype for t in tensors if not t.shape]
        target = _dt.result_type(dims, zeros, scalars)
    if mode == "integer" and target.is_floating_point:
        raise DTypeError(f"{op.name}: needs integer or bool tensors, got {target.name}; "
                         f"cast with .int() or .long() first")
    if mode == "float" and not target.is_floating_point:
        target = _dt.default_float
    return {i: target for i, a in enumerate(args) if i >= start and isinstance(a, TensorMeta) and a.dtype is not target}
