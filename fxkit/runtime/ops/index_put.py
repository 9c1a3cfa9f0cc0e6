"""index_put: ``torch.index_put(x, indices, values, accumulate)``, the out-of-place
form of ``x[indices] = values`` (``accumulate=True``: ``x[indices] += values`` with
repeated indices adding up, which ``setitem`` cannot express).

``indices`` is a tuple with one entry per leading dimension: an integer or
boolean tensor, or None for the whole dimension (ATen's form). It indexes as
``x[indices]`` does, with the same PyTorch rules (`indexing.torch_index`), so
``x.index_put_(indices, v)`` and ``x[indices] = v`` write the same elements.
"""
from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op
from fxkit.runtime.ops.indexing import _out_of_range, combine_at, numpy_index_shape, torch_index
from fxkit.runtime.ops.nn_checks import dtype_of


def _items(name, indices):
    """The index tuple of ``x[indices]``: None entries are whole dimensions."""
    if not isinstance(indices, (tuple, list)):
        raise ShapeError(f"{name}: indices must be a tuple of tensors (one per leading dimension), "
                         f"got {type(indices).__name__}; write x.index_put_((idx,), values)")
    for i in indices:
        if i is not None and not hasattr(i, "dtype"):
            raise DTypeError(f"{name}: expected a tensor (or None) as each entry of indices, got "
                             f"{type(i).__name__}; wrap it with fxkit.tensor(...)")
        if i is not None and dtype_of(i).is_floating_point:
            raise DTypeError(f"{name}: tensors used as indices must be long, int or bool tensors, "
                             f"got {dtype_of(i).name}")
    return tuple(slice(None) if i is None else i for i in indices)


def _check_values(name, a_dtype, values):
    if not hasattr(values, "shape") or not hasattr(values, "dtype"):
        raise DTypeError(f"{name}: values must be a tensor, got {type(values).__name__}; "
                         f"write fxkit.tensor(value, dtype=x.dtype)")
    v_dtype = dtype_of(values)
    if v_dtype is not None and v_dtype is not a_dtype:
        raise DTypeError(f"{name}: index_put requires the source and destination dtypes match, got "
                         f"{a_dtype.name} for the destination and {v_dtype.name} for the source; "
                         f"cast values with .to({a_dtype.name})")


def _index_put_rule(input, indices, values, accumulate=False):  # noqa: A002
    items = _items("index_put", indices)
    _check_values("index_put", input.dtype, values)
    if not any(isinstance(i, TensorMeta) and i.dtype is _dt.bool_
                                                  for i in items):
        first, second = torch_index(items, len(input.shape), "index_put")
        target = numpy_index_shape(tuple(input.shape), first, "index_put")
        if second is not None:
            target = numpy_index_shape(target, second, "index_put")
        if broadcast_shapes(tuple(values.shape), target, op_name="index_put") != tuple(target):
            raise ShapeError(f"index_put: shape mismatch: values of shape {list(values.shape)} cannot be "
                             f"broadcast to the indexing result of shape {list(target)}")
    return TensorMeta(tuple(input.shape), input.dtype, input.device)


def _as_integers(xp, items, shape):
    """Boolean masks become the integer indices of their True entries (``ufunc.at`` wants
    integers); a mask over k dimensions becomes k index arrays, and must have their sizes."""
    out = []
    pos = 0
    for i in items:
        if getattr(getattr(i, "dtype", None), "kind", "") == "b":
            covered = tuple(shape[pos:pos + i.ndim])
            if tuple(i.shape) != covered:
                raise IndexOutOfRangeError(f"index_put: the shape of the mask {list(i.shape)} at index {pos} does not "
                                           f"match the shape of the indexed tensor {list(shape)} at index {pos}")
            out.extend(xp.nonzero(i))
            pos += i.ndim
        else:
            out.append(i)
            pos += 0 if i is None else 1
    return tuple(out)


@op("index_put", kind="other", shape_rule=_index_put_rule)
def index_put(xp, input, indices, values, accumulate=False):  # noqa: A002
    """A copy of ``a`` with ``out[indices] = values`` (``+=`` with ``accumulate``).

    Args:
        a: the tensor written into (a copy of it; ``index_put_`` writes in place).
        indices: a tuple of integer or boolean tensors (or None for a whole dimension),
            one per leading dimension, as in ``a[indices]``.
        values: a tensor of ``a``'s dtype, broadcast to ``a[indices]``'s shape.
        accumulate: add into the entries, repeated indices adding up, instead of writing.

    Example:
        >>> fxkit.zeros(3).index_put((fxkit.tensor([0, 0, 2]),), fxkit.tensor(1.0), accumulate=True)
        tensor([2., 0., 1.])
    """
    items = _items("index_put", indices)
    _check_values("index_put", _dt.from_numpy(input.dtype), values)
    out = input.copy()
    first, second = torch_index(items, input.ndim, "index_put")
    try:
        if not accumulate:
            if second is None:
                out[first] = values
            else:
                out[first][second] = values
            return out
        view = out if second is None else out[first]
        where = _as_integers(xp, first if second is None else second, view.shape)
        target = view[where].shape
        combine_at(xp, "add", view, where, xp.broadcast_to(xp.asarray(values, input.dtype), target))
    except IndexError as exc:
        raise _out_of_range("index_put", exc, input, indices) from None
    except ValueError as exc:
        shape = list(getattr(values, 'shape', ()))
        raise ShapeError(f"index_put: shape mismatch: values of shape {shape} cannot be broadcast to the "
                         f"indexing result of tensor of shape {list(input.shape)} ({exc})") from None
    return out
