"""Indexing: ``x[index]`` and ``x[index] = value`` with PyTorch's rules.

numpy's indexing is PyTorch's except in three places, fixed up here:
integers next to advanced (tensor) indices are selects applied first
(``x[0, :, idx]`` has shape ``[6, 4]`` for ``x`` of shape ``[5, 6, 7]``, numpy
gives ``[4, 6]``); an Ellipsis that stands for no dimension does not separate
advanced indices; and negative slice steps are refused. 0-d integer tensors
index like ints, and an all-integer index returns a 0-d view, not a copy.
"""
import math

import numpy as np

from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import int_arg, normalize_dim
from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.tensor import Tensor

_INT_CATEGORY = 1


def _item(i, name):
    """One index item with Tensors unwrapped, 0-d integer indices as ints, steps checked."""
    if isinstance(i, Tensor):
        i = i._data
    t = type(i)
    if t is int or t is slice and (i.step is None or i.step > 0) or i is None or i is Ellipsis:
        return i
    if t is slice:
        raise ShapeError(f"{name}: step must be greater than zero, got slice {i.start}:{i.stop}:{i.step}; "
                         f"use .flip(dim) to reverse a dimension")
    if isinstance(i, TensorMeta):
        return 0 if not i.shape and i.dtype.category == _INT_CATEGORY else i
    if isinstance(i, np.integer):
        return int(i)
    if hasattr(i, "ndim") and i.ndim == 0 and i.dtype.kind in "iu":
        return int(i)
    if isinstance(i, list) and any(isinstance(x, Tensor) for x in i):
        return [x._data if isinstance(x, Tensor) else x for x in i]
    return i


def _is_advanced(i):
    return not (type(i) is int or type(i) is slice or i is None or i is Ellipsis)


def _consumed(i):
    """How many input dimensions an index item uses up."""
    if i is None or i is Ellipsis or type(i) is bool:
        return 0
    if type(i) is int or type(i) is slice:
        return 1
    dtype = getattr(i, "dtype", None)
    if dtype is _dt.bool_ or getattr(dtype, "kind", None) == "b":
        return len(i.shape)
    return 1


def _as_tuple(index):
    """PyTorch's (and old numpy's) rule: a short list holding tensors, sequences, slices,
    None or Ellipsis is a tuple of indices; other lists are one integer or mask index.
    (Dispatch also hands ``x[t1, t2]`` over as a list, having unwrapped its tensors.)"""
    if type(index) is tuple:
        return index
    if type(index) is list and len(index) < 32 and any(
            i is None or i is Ellipsis or isinstance(i, (slice, list, tuple, Tensor)) or hasattr(i, "ndim")
            for i in index):
        return tuple(index)
    return (index,)


def torch_index(index, ndim, name="getitem"):
    """``(first, second)``: numpy indices that give PyTorch's result of ``x[index]``
    applied one after the other; ``second`` is None when one step suffices."""
    items = index if type(index) is tuple else _as_tuple(index)
    for i in items:  # fast path: basic indexing passes through as it is
        t = type(i)
        if not (t is int or i is None or i is Ellipsis or t is slice and (i.step is None or i.step > 0)):
            break
    else:
        return items, None
    items = tuple(_item(i, name) for i in items)
    if not any(_is_advanced(i) for i in items):
        return items, None
    if any(i is Ellipsis for i in items) and sum(_consumed(i) for i in items) == ndim:
        items = tuple(i for i in items if i is not Ellipsis)
    if not any(type(i) is int for i in items):
        return items, None
    first, second = [], []
    for i in items:
        if type(i) is int:
            first.append(i)
        elif i is None:
            second.append(i)
        elif i is Ellipsis:
            first.append(i)
            second.append(i)
        else:
            first.extend([slice(None)] * _consumed(i))
            second.append(i)
    return tuple(first), tuple(second)


def _out_of_range(name, exc, a, index):
    message = str(exc).replace(" axis ", " dimension ")
    return IndexOutOfRangeError(f"{name}: {message} (tensor of shape {list(a.shape)}, index {index!r})")


def _slice_len(n, s):
    if type(n) is int:
        return len(range(*s.indices(n)))
    start, stop, step = s.start, s.stop, s.step or 1
    if start is None and stop is None:
        return n if step == 1 else (n + step - 1) // step
    # NOTE: a symbolic dim is assumed long enough for the slice's bounds
    start = 0 if start is None else (start + n if start < 0 else start)
    stop = n if stop is None else (stop + n if stop < 0 else stop)
    length = stop if type(start) is int and start == 0 else stop - start
    return length if step == 1 else (length + step - 1) // step


def _advanced_shape(i):
    """The broadcast shape an advanced index item contributes."""
    if isinstance(i, TensorMeta):
        if i.dtype is _dt.bool_:
            raise ShapeError("getitem: the result shape of a boolean mask depends on its values "
                             "and cannot be inferred without running")
        return tuple(i.shape)
    if type(i) is bool:
        return (int(i),)
    arr = np.asarray(i)
    return (int(arr.sum()),) if arr.dtype == np.bool_ else arr.shape


def numpy_index_shape(shape, items, name="getitem"):
    """The shape of ``array[items]`` under numpy's rules, from the shape alone."""
    ndim = len(shape)
    used = sum(_consumed(i) for i in items)
    if used > ndim:
        raise IndexOutOfRangeError(f"{name}: too many indices for tensor of dimension {ndim} (index {items!r})")
    ellipses = [k for k, i in enumerate(items) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexOutOfRangeError(f"{name}: an index can only have a single ellipsis (index {items!r})")
    fill = (slice(None),) * (ndim - used)
    items = items[:ellipses[0]] + fill + items[ellipses[0] + 1:] if ellipses else items + fill
    out, advanced, places = [], [], []
    p = 0
    for k, i in enumerate(items):
        if i is None:
            out.append(1)
        elif type(i) is slice:
            out.append(_slice_len(shape[p], i))
        elif type(i) is int:
            n = shape[p]
            if type(n) is int and not -n <= i < n:
                raise IndexOutOfRangeError(f"{name}: index {i} is out of bounds for dimension {p} with size {n}")
        else:
            advanced.append(_advanced_shape(i))
            places.append((k, len(out)))
        p += _consumed(i)
    if advanced:
        joined = broadcast_shapes(*advanced, op_name=name)
        ks = [k for k, _ in places]
        at = places[0][1] if ks == list(range(ks[0], ks[0] + len(ks))) else 0
        out[at:at] = joined
    return tuple(out)


def _getitem_rule(a, index):
    if not isinstance(a, TensorMeta):
        return a[index]
    first, second = torch_index(index, len(a.shape))
    shape = numpy_index_shape(tuple(a.shape), first)
    if second is not None:
        shape = numpy_index_shape(shape, second)
    return TensorMeta(shape, a.dtype, a.device)


@op("getitem", kind="view", shape_rule=_getitem_rule, method=False)
def getitem(xp, a, index):
    """``a[index]`` with PyTorch's basic and advanced indexing; also picks an element
    of a tuple, list or dict (the outputs of ``chunk`` or ``max``, nested graph inputs)."""
    if isinstance(a, (list, tuple, dict)):
        return a[index]
    first, second = torch_index(index, a.ndim)
    try:
        out = a[first]
        if second is not None:
            out = out[second]
    except IndexError as exc:
        raise _out_of_range("getitem", exc, a, index) from None
    if isinstance(out, np.generic):
        return a[first + (Ellipsis,)]
    return out


@op("setitem", kind="other", shape_rule=lambda a, index, value: None, method="__setitem__", pure=False)
def setitem(xp, a, index, value):
    """``a[index] = value`` in place (``value`` is cast to ``a``'s dtype); returns None."""
    if value is None or isinstance(value, str):  # numpy would write NaN (None) or parse the string
        raise DTypeError(f"setitem: the value must be a tensor or a number, got {type(value).__name__} {value!r}")
    first, second = torch_index(index, a.ndim, "setitem")
    try:
        if second is None:
            a[first] = value
        else:
            a[first][second] = value
    except IndexError as exc:
        raise _out_of_range("setitem", exc, a, index) from None
    except ValueError as exc:
        if not getattr(a.flags, "writeable", True):
            raise ShapeError("setitem: the tensor is a read-only broadcast view (from expand); more than one of "
                             "its elements refers to a single memory location; call .clone() or "
                             ".contiguous() before writing into it") from None
        got = list(getattr(value, "shape", ()))
        raise ShapeError(f"setitem: shape mismatch: value of shape {got} cannot be broadcast to the indexing "
                         f"result of tensor of shape {list(a.shape)} with index {index!r} ({exc})") from None
    return None


def _is_integer(index):
    if isinstance(index, TensorMeta):
        return index.dtype.category == _INT_CATEGORY
    return getattr(index, "dtype", None) is not None and index.dtype.kind in "iu"


def _check_integer(name, index):
    if not _is_integer(index):
        got = getattr(index, "dtype", type(index).__name__)
        raise DTypeError(f"{name}: expected an integer (int64) index tensor, got {getattr(got, 'name', got)}")


def _differ_larger(x, y):
    return type(x) is int and type(y) is int and x > y


def along_layout(name, shape, dim, index, src_shape=None):
    """Check ``gather``/``scatter``'s index against the input (and ``src``); return the dim."""
    _check_integer(name, index)
    ishape = tuple(index.shape)
    d = normalize_dim(dim, len(shape), name)
    if max(len(shape), 1) != max(len(ishape), 1):
        raise ShapeError(f"{name}: index tensor must have the same number of dimensions as the input tensor; "
                         f"input shape {list(shape)}, index shape {list(ishape)}")
    for i, (x, y) in enumerate(zip(ishape, shape)):
        if i != d and _differ_larger(x, y):
            raise ShapeError(f"{name}: size does not match at dimension {i}: expected index {list(ishape)} to be "
                             f"no larger than the input {list(shape)} apart from dimension {d}")
    if src_shape is not None:
        for i, (x, y) in enumerate(zip(ishape, src_shape)):
            if _differ_larger(x, y):
                raise ShapeError(f"{name}: expected index {list(ishape)} to be no larger than src "
                                 f"{list(src_shape)} (dimension {i})")
    return d


def _check_bounds(name, index, d, n):
    """Indices must lie in ``[0, n)``; PyTorch does not wrap negative ones here."""
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= n:
            raise IndexOutOfRangeError(f"{name}: index {lo if lo < 0 else hi} is out of bounds for dimension {d} "
                                       f"with size {n}")


def _along(xp, index, d):
    """The advanced index that pairs ``index`` along ``d`` with every position elsewhere."""
    ndim = index.ndim
    return tuple(index if i == d else xp.arange(index.shape[i]).reshape((-1,) + (1,) * (ndim - 1 - i))
                 for i in range(ndim))


FLAT_INDEX_MIN = 2048
"""Indices from which `flat_along` pays: on (32, 32, 64) planes with 16 picks each, a scatter
through the open mesh of `_along` took 53 us, through one flat index 25 us (a gather 50 -> 17);
below ~1000 picks the flat index's own arithmetic costs more than it saves."""


def flat_along(xp, index, d, shape):
    """The flat positions, in a C-contiguous array of ``shape``, that ``index`` names along ``d``
    (every other coordinate its own): what `_along` names, as one integer array of ``index``'s shape.

    numpy indexes with one integer array several times faster than with an open mesh of ``ndim``
    arrays it must broadcast (max pool's backward scatters a gradient this way)."""
    index_shape = index.shape
    if d > 1 and tuple(index.shape[:d]) == tuple(shape[:d]):  # the leading dims walk like one
        lead = math.prod(shape[:d])
        index, shape, d = index.reshape((lead,) + tuple(index.shape[d:])), (lead,) + tuple(shape[d:]), 1
    strides = [1] * index.ndim
    for i in range(index.ndim - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    flat = index * strides[d] if strides[d] != 1 else index.astype(xp.intp, copy=True)
    for i, n in enumerate(index.shape):
        if i != d and n > 1:
            flat += (xp.arange(n) * strides[i]).reshape((-1,) + (1,) * (index.ndim - 1 - i))
    return flat.reshape(index_shape)


def rows_fit(xp, out, d, index, values):
    """Whether a scatter of ``values`` into ``out`` along ``d`` by ``index`` runs as `pool_loops`' row loop:
    along the last dim, one index row for each row of ``out`` (max pool's backward), ``values`` of the
    index's shape, int64 indices, and arrays `loop_gate.loops_fit` lets run."""
    return (d == out.ndim - 1 and out.ndim >= 2 and index.size >= FLAT_INDEX_MIN and index.dtype == np.int64
            and tuple(index.shape[:-1]) == tuple(out.shape[:-1]) and tuple(values.shape) == tuple(index.shape)
            and out.flags.c_contiguous and loops_fit(xp, out, values))


def as_rows(out, index, values):
    """``out`` (C-contiguous), ``index`` and ``values`` as the 2-D rows `pool_loops`' scatters take."""
    length, picks = out.shape[-1], index.shape[-1]
    return out.reshape(-1, length), index.reshape(-1, picks), values.reshape(-1, picks)


def _gather_rule(input, dim, index):  # noqa: A002
    along_layout("gather", tuple(input.shape), dim, index)
    return TensorMeta(tuple(index.shape), input.dtype, input.device)


@op("gather", kind="other", shape_rule=_gather_rule)
def gather(xp, input, dim, index):  # noqa: A002
    """``out[i][j] = a[i][index[i][j]]`` for ``dim=1``: values picked along ``dim``."""
    d = along_layout("gather", input.shape, dim, index)
    shape = index.shape
    if input.ndim == 0 or index.ndim == 0:
        input, index = input.reshape(-1), index.reshape(-1)
    _check_bounds("gather", index, d, input.shape[d])
    if index.size >= FLAT_INDEX_MIN and input.flags.c_contiguous:
        return xp.take(input.reshape(-1), flat_along(xp, index, d, input.shape))
    return input[_along(xp, index, d)].reshape(shape)


def _scatter_source(src, value):
    if src is not None and value is not None:
        raise ShapeError("scatter: give either src (a tensor) or value (a number), not both")
    if src is None and value is None:
        raise ShapeError("scatter: missing src (a tensor) or value (a number) to write")
    return (None, src) if src is not None and not hasattr(src, "shape") else (src, value)


_REDUCTIONS = (None, "add", "multiply")


def _check_reduce(reduce):
    if reduce not in _REDUCTIONS:
        raise ValueError(f"scatter: reduce argument must be either 'add' or 'multiply', got {reduce!r}")


def _scatter_rule(input, dim, index, src=None, value=None, reduce=None):  # noqa: A002
    _check_reduce(reduce)
    src, value = _scatter_source(src, value)
    along_layout("scatter", tuple(input.shape), dim, index, None if src is None else tuple(src.shape))
    if src is not None and src.dtype is not input.dtype:
        raise _scatter_dtype_error(input.dtype, src.dtype)
    return TensorMeta(tuple(input.shape), input.dtype, input.device)


def _scatter_dtype_error(a_dtype, src_dtype):
    return DTypeError(f"scatter: expected self.dtype to be equal to src.dtype, got {a_dtype.name} and "
                      f"{src_dtype.name}; cast src with .to({a_dtype.name})")


@op("scatter", kind="other", shape_rule=_scatter_rule)
def scatter(xp, input, dim, index, src=None, value=None, reduce=None):  # noqa: A002
    """A copy of ``a`` with ``out[i][index[i][j]] = src[i][j]`` for ``dim=1`` (or ``value``).

    ``reduce='add'`` or ``'multiply'`` combines instead of overwriting: repeated
    indices all take part, as in ``torch.scatter(..., reduce=...)``.
    """
    _check_reduce(reduce)
    src, value = _scatter_source(src, value)
    d = along_layout("scatter", input.shape, dim, index, None if src is None else src.shape)
    if src is not None and src.dtype != input.dtype:
        raise _scatter_dtype_error(_dt.from_numpy(input.dtype), _dt.from_numpy(src.dtype))
    shape = input.shape
    if input.ndim == 0 or index.ndim == 0:
        input, index = input.reshape(-1), index.reshape(-1)
        src = None if src is None else src.reshape(-1)
    _check_bounds("scatter", index, d, input.shape[d])
    out = input.copy()
    fill = value if src is None else src[tuple(slice(0, s) for s in index.shape)]
    if reduce is None and src is not None and rows_fit(xp, out, d, index, fill):
        from fxkit.runtime.ops.pool_loops import scatter_rows  # NOTE: numba loads at the first large scatter

        scatter_rows(*as_rows(out, index, fill), False)  # NOTE: bounds checked above
        return out.reshape(shape)
    if reduce is None and index.size >= FLAT_INDEX_MIN:
        out.reshape(-1)[flat_along(xp, index, d, out.shape)] = fill
        return out.reshape(shape)
    where = _along(xp, index, d)
    if reduce is None:
        out[where] = fill
    else:
        combine_at(xp, reduce, out, where, xp.broadcast_to(xp.asarray(fill, out.dtype), index.shape))
    return out.reshape(shape)


def combine_at(xp, reduce, out, where, values):
    """``out[where] += values`` (``reduce='add'``) or ``*=`` (``'multiply'``), every repeated
    index taking part (numpy's ``ufunc.at``)."""
    if xp.__name__ == "numpy":
        (np.add if reduce == "add" else np.multiply).at(out, where, values)
    elif reduce == "add":
        import cupyx  # NOTE: imported only with a cuda tensor, like cupy itself

        cupyx.scatter_add(out, where, values)
    else:
        # NOTE: cupy has no multiply.at; the rare multiplying scatter runs on the host.
        host = out.get()
        np.multiply.at(host, tuple(w.get() if hasattr(w, "get") else w for w in where), values.get())
        out.set(host)


def _index_select_shape(name, shape, dim, index):
    _check_integer(name, index)
    if len(index.shape) > 1:
        raise IndexOutOfRangeError(f"{name}: index is supposed to be a vector (0-d or 1-d), "
                                   f"got shape {list(index.shape)}")
    d = normalize_dim(dim, len(shape), name)
    if not shape:
        return d, ()
    return d, tuple(shape[:d]) + (math.prod(index.shape),) + tuple(shape[d + 1:])


def _index_select_rule(input, dim, index):  # noqa: A002
    _, shape = _index_select_shape("index_select", input.shape, dim, index)
    return TensorMeta(shape, input.dtype, input.device)


@op("index_select", kind="other", shape_rule=_index_select_rule)
def index_select(xp, input, dim, index):  # noqa: A002
    """The entries of ``a`` at positions ``index`` (a vector) along ``dim``."""
    d, shape = _index_select_shape("index_select", input.shape, dim, index)
    index = index.reshape(-1)
    n = input.shape[d] if input.ndim else 1
    _check_bounds("index_select", index, d, n)
    return xp.take(input.reshape(-1) if not input.ndim else input, index, axis=d).reshape(shape)


def _masked_fill_check(mask, value):
    dtype = getattr(mask, "dtype", None)
    if dtype is not _dt.bool_ and getattr(dtype, "kind", None) != "b":
        got = getattr(dtype, "name", dtype) if dtype is not None else f"{type(mask).__name__} (not a tensor)"
        raise DTypeError(f"masked_fill: only supports boolean masks, but got mask with dtype {got}; "
                         f"build it with a comparison (x > 0) or .bool()")
    if hasattr(value, "shape") and len(value.shape):
        raise ShapeError(f"masked_fill: only supports a 0-dimensional value tensor, but got a tensor of shape "
                         f"{list(value.shape)}")


def _masked_fill_rule(input, mask, value):  # noqa: A002
    _masked_fill_check(mask, value)
    return TensorMeta(broadcast_shapes(input.shape, mask.shape, op_name="masked_fill"), input.dtype, input.device)


@op("masked_fill", kind="elementwise", promote="keep", template="where(b, c, a)", shape_rule=_masked_fill_rule)
def masked_fill(xp, input, mask, value):  # noqa: A002
    """``value`` where ``mask`` is True, else ``a``; the result keeps ``a``'s dtype."""
    _masked_fill_check(mask, value)
    value = value.astype(input.dtype) if hasattr(value, "shape") else input.dtype.type(value)
    return xp.where(mask, value, input)


def _check_matrix(name, shape):
    if len(shape) < 2:
        raise ShapeError(f"{name}: input tensor must have at least 2 dimensions, got shape {list(shape)}")


def _triangle_rule(name):
    def rule(input, diagonal=0):  # noqa: A002
        _check_matrix(name, input.shape)
        return TensorMeta(tuple(input.shape), input.dtype, input.device)

    return rule


@op("tril", kind="other", shape_rule=_triangle_rule("tril"))
def tril(xp, input, diagonal=0):  # noqa: A002
    """The lower triangle of the last two dims (on and below ``diagonal``); the rest zeroed."""
    _check_matrix("tril", input.shape)
    return xp.tril(input, int_arg(diagonal, "tril", "diagonal"))


@op("triu", kind="other", shape_rule=_triangle_rule("triu"))
def triu(xp, input, diagonal=0):  # noqa: A002
    """The upper triangle of the last two dims (on and above ``diagonal``); the rest zeroed."""
    _check_matrix("triu", input.shape)
    return xp.triu(input, int_arg(diagonal, "triu", "diagonal"))
