"""ONNX export rules of view, indexing, joining, rolling and factory ops.

Reshaping ops (``view``, ``reshape``, ``flatten``, ``unflatten``) export as a
``Reshape`` to the node's inferred output shape; a single symbolic dimension
becomes ``-1`` there, more become ``Shape`` arithmetic (see `OnnxBuilder.ints`).
"""
import numpy as np

from fxkit.interop.onnx_builder import Value, onnx_dtype
from fxkit.interop.onnx_rules import axis, concrete, export_rule, unsupported
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import same_dim

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


@export_rule("view", "reshape", "unflatten")
def _reshape(b, op, a, out):
    return b.reshape(a.input.name, out.shape)


@export_rule("flatten")
def _flatten(b, op, a, out):
    x = a.input
    rank = len(x.meta.shape)
    if rank >= 2 and axis(a.start_dim, rank) == 1 and axis(a.end_dim, rank) == rank - 1:
        return b.op("Flatten", x.name, axis=1)
    return b.reshape(x.name, out.shape)


@export_rule("squeeze")
def _squeeze(b, op, a, out):
    shape = a.input.meta.shape
    if a.dim is None:
        dims = range(len(shape))
    else:
        dims = a.dim if isinstance(a.dim, (tuple, list)) else (a.dim,)
    axes = [axis(d, len(shape)) for d in dims if len(shape)]
    axes = [d for d in axes if type(shape[d]) is int and shape[d] == 1]
    return b.op("Squeeze", a.input.name, b.ints(axes)) if axes else a.input.name


@export_rule("unsqueeze")
def _unsqueeze(b, op, a, out):
    return b.op("Unsqueeze", a.input.name, b.ints([axis(a.dim, len(out.shape))]))


@export_rule("permute")
def _permute(b, op, a, out):
    dims = a.dims if a.dims is not None else a.args
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    rank = len(out.shape)
    return b.op("Transpose", a.input.name, perm=[axis(d, rank) for d in dims])


@export_rule("transpose", "t")
def _transpose(b, op, a, out):
    rank = len(out.shape)
    if rank < 2:
        return a.input.name
    d0, d1 = (axis(a.dim0, rank), axis(a.dim1, rank)) if op.name == "transpose" else (0, 1)
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.op("Transpose", a.input.name, perm=perm)


@export_rule("numpy_T")
def _numpy_t(b, op, a, out):
    return b.op("Transpose", a.input.name, perm=list(range(len(out.shape)))[::-1])


@export_rule("contiguous")
def _contiguous(b, op, a, out):
    return a.input.name


@export_rule("expand")
def _expand(b, op, a, out):
    shape = a.input.meta.shape
    offset = len(out.shape) - len(shape)
    # A dim the input already has expands as 1 (Expand broadcasts), which keeps symbolic dims out.
    dims = [1 if i >= offset and same_dim(shape[i - offset], d) else d for i, d in enumerate(out.shape)]
    return b.op("Expand", a.input.name, b.ints(dims))


@export_rule("getitem")
def _getitem(b, op, a, out):
    if isinstance(a.a, (tuple, list)):
        # an element of a tuple of results (chunk, split, a layer's outputs), itself maybe a tuple (LSTM's (h, c))
        picked = a.a[a.index]
        return picked.name if isinstance(picked, Value) else picked
    x, items = a.a, a.index if isinstance(a.index, tuple) else (a.index,)
    if sum(isinstance(i, Value) for i in items) > 1 or any(isinstance(i, (list, tuple)) for i in items):
        return _gather_nd(b, op, x, items, out)
    rank = len(x.meta.shape)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    cur, pos = x.name, 0
    for item in items:
        if item is None:
            cur = b.op("Unsqueeze", cur, b.ints([pos]))
            pos += 1
        elif item is Ellipsis:
            pos += rank - consumed
        elif isinstance(item, slice):
            cur = _slice(b, op, cur, pos, item)
            pos += 1
        elif isinstance(item, Value):
            if item.meta.dtype is _dt.bool_:
                raise unsupported(op, "boolean mask indexing (its result shape depends on the data)",
                                  "use fxkit.where(mask, x, other) instead")
            cur = b.op("Gather", cur, item.name, axis=pos)
            pos += len(item.meta.shape)
        elif type(item) is int:
            cur = b.op("Gather", cur, b.scalar(item, _dt.int64), axis=pos)
        else:
            raise unsupported(op, f"an index of type {type(item).__name__} ({item!r})")
    return cur


def _gather_nd(b, op, x, items, out):
    """``x[..., i0, i1, ...]`` with several index tensors side by side (full slices around them): GatherND.

    The indexed dims move to the front, the index tensors broadcast against
    each other (adding a zero of every other one keeps symbolic dims symbolic)
    and stack into GatherND's last axis; the result's broadcast index dims then
    move back to where the first index stood, as numpy and torch place them.
    """
    full = slice(None)
    positions = [p for p, i in enumerate(items) if isinstance(i, Value)]
    first, count = positions[0], len(positions)
    rest = [i for p, i in enumerate(items) if p not in positions]
    if (positions != list(range(first, first + count)) or any(not (i == full or i is Ellipsis) for i in rest)
            or Ellipsis in items[:first] or any(items[p].meta.dtype is _dt.bool_ for p in positions)):
        raise unsupported(op, "indexing with several index tensors that are not side by side, or mixed with "
                          "lists, numbers, None or partial slices", "index one dimension at a time")
    rank = len(x.meta.shape)
    indices = [b.cast(items[p], _dt.int64) for p in positions]
    zero = b.scalar(0, _dt.int64)
    spread = indices[0] if count == 1 else b.op("Mul", indices[0], zero)
    for index in indices[1:]:
        spread = b.op("Add", spread, b.op("Mul", index, zero))
    stacked = b.op("Concat", *[b.op("Unsqueeze", b.op("Add", i, spread), b.ints([-1])) for i in indices], axis=-1)
    front = list(range(first, first + count)) + list(range(first)) + list(range(first + count, rank))
    gathered = b.op("GatherND", b.op("Transpose", x.name, perm=front), stacked)
    batch = len(out.shape) - (rank - count)
    back = list(range(batch, batch + first)) + list(range(batch)) + list(range(batch + first, len(out.shape)))
    return gathered if back == sorted(back) else b.op("Transpose", gathered, perm=back)


def _slice(b, op, x, pos, item):
    step = 1 if item.step is None else concrete(op, "slice step", item.step)
    if item.start is None and item.stop is None and step == 1:
        return x
    start = 0 if item.start is None else item.start
    stop = _INT64_MAX if item.stop is None else item.stop
    return b.op("Slice", x, b.ints([start]), b.ints([stop]), b.ints([pos]), b.ints([step]))


@export_rule("narrow")
def _narrow(b, op, a, out):
    dim = axis(a.dim, len(out.shape))
    return _slice(b, op, a.input.name, dim, slice(a.start, a.start + a.length))


@export_rule("chunk", "split")
def _split(b, op, a, out):
    if len(out) == 1:
        return (a.input.name,)
    dim = axis(a.dim, len(out[0].shape))
    sizes = [m.shape[dim] for m in out]
    return tuple(b.op("Split", a.input.name, b.ints(sizes), axis=dim, outputs=len(out)))


@export_rule("cat", "stack")
def _cat(b, op, a, out):
    rank = len(out.shape)
    dim = axis(a.dim, rank)
    parts = [b.operand(t, out.dtype) for t in a.tensors]
    if op.name == "stack":
        parts = [b.op("Unsqueeze", p, b.ints([dim])) for p in parts]
    return b.op("Concat", *parts, axis=dim)


@export_rule("repeat", "tile")
def _repeat(b, op, a, out):
    x = a.input
    keyword = a.repeats if op.name == "repeat" else a.dims
    sizes = keyword if keyword is not None else (a.sizes if op.name == "repeat" else a.args)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    rank = len(x.meta.shape)
    sizes = (1,) * (rank - len(sizes)) + tuple(sizes)  # tile pads its dims on the left
    data = x.name
    if len(sizes) > rank:
        data = b.op("Unsqueeze", data, b.ints(range(len(sizes) - rank)))
    return b.op("Tile", data, b.ints(sizes))


@export_rule("flip")
def _flip(b, op, a, out):
    dims = a.dims if a.dims is not None else a.args
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    axes = [axis(d, len(out.shape)) for d in dims]
    n = len(axes)
    return b.op("Slice", a.input.name, b.ints([-1] * n), b.ints([_INT64_MIN] * n), b.ints(axes), b.ints([-1] * n))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@export_rule("pad")
def _pad(b, op, a, out):
    pads = concrete(op, "padding", tuple(a.pad))
    if any(p < 0 for p in pads) or a.mode not in _PAD_MODES:
        raise unsupported(op, f"padding {list(pads)} in mode {a.mode!r}")
    rank = len(out.shape)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pads) // 2):  # torch lists (begin, end) pairs from the last dim backwards
        begins[rank - 1 - i], ends[rank - 1 - i] = pads[2 * i], pads[2 * i + 1]
    value = None
    if a.mode == "constant":
        value = b.scalar(0 if a.value is None else a.value, out.dtype)
    return b.op("Pad", a.input.name, b.ints(begins + ends), value, mode=_PAD_MODES[a.mode])


def _filled(b, out, value):
    import onnx

    fill = onnx.helper.make_tensor("value", onnx_dtype(out.dtype), [1], [np.asarray(value, out.dtype.np).item()])
    return b.op("ConstantOfShape", b.ints(out.shape), value=fill)


@export_rule("zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like")
def _constant_of_shape(b, op, a, out):
    return _filled(b, out, 1 if op.name.startswith("ones") else 0)


@export_rule("full")
def _full(b, op, a, out):
    return _filled(b, out, a.fill_value)


@export_rule("full_like")
def _full_like(b, op, a, out):
    return _filled(b, out, a.fill_value)


@export_rule("arange")
def _arange(b, op, a, out):
    start, end = (0, a.start) if a.end is None else (a.start, a.end)
    bounds = (start, end, a.step)
    if all(type(v) in (int, float) for v in bounds):
        return b.const(np.arange(*bounds).astype(out.dtype.np), out.dtype)
    scalars = [b.dim_scalar(v, out.dtype) if type(v) is not float else b.scalar(v, out.dtype) for v in bounds]
    return b.op("Range", *scalars)


@export_rule("tril", "triu")
def _trilu(b, op, a, out):
    return b.op("Trilu", a.input.name, b.scalar(a.diagonal, _dt.int64), upper=int(op.name == "triu"))


@export_rule("gather")
def _gather(b, op, a, out):
    return b.op("GatherElements", a.input.name, a.index.name, axis=axis(a.dim, len(out.shape)))


@export_rule("index_select")
def _index_select(b, op, a, out):
    return b.op("Gather", a.input.name, a.index.name, axis=axis(a.dim, len(out.shape)))


@export_rule("one_hot")
def _one_hot(b, op, a, out):
    depth = out.shape[-1]
    values = b.const([0, 1], out.dtype)
    return b.op("OneHot", a.input.name, b.dim_scalar(depth, _dt.int64), values, axis=-1)


@export_rule("swapaxes", "swapdims")
def _swapaxes(b, op, a, out):
    rank = len(out.shape)
    first, second = (a.axis0, a.axis1) if op.name == "swapaxes" else (a.dim0, a.dim1)
    perm = list(range(rank))
    if rank:
        d0, d1 = axis(first, rank), axis(second, rank)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.op("Transpose", a.input.name, perm=perm) if perm != sorted(perm) else a.input.name


@export_rule("unbind")
def _unbind(b, op, a, out):
    rank = len(out[0].shape) + 1
    dim = axis(a.dim, rank)
    if len(out) == 1:
        return (b.op("Squeeze", a.input.name, b.ints([dim])),)
    pieces = b.op("Split", a.input.name, b.ints([1] * len(out)), axis=dim, outputs=len(out))
    return tuple(b.op("Squeeze", p, b.ints([dim])) for p in pieces)


def _roll_dim(b, x, shift, dim, size):
    """``x`` rolled by ``shift`` along ``dim``: its last ``shift`` elements moved to the front."""
    if type(size) is int:
        shift %= max(size, 1)
        if shift == 0:
            return x
    # NOTE: with a symbolic size, |shift| < size is assumed (Slice clamps, a larger shift would not wrap)
    cut = b.const([-shift], _dt.int64)  # x[-shift:] then x[:-shift], for either sign of shift
    axes = b.const([dim], _dt.int64)
    tail = b.op("Slice", x, cut, b.const([_INT64_MAX], _dt.int64), axes)
    head = b.op("Slice", x, b.const([0], _dt.int64), cut, axes)
    return b.op("Concat", tail, head, axis=dim)


@export_rule("roll")
def _roll(b, op, a, out):
    x, shape = a.input.name, tuple(a.input.meta.shape)
    if a.dims is None:
        flat = b.op("Reshape", x, b.ints([-1]))
        total = 1
        for d in shape:
            total = total * d
        return b.reshape(_roll_dim(b, flat, int(a.shifts[0] if isinstance(a.shifts, (tuple, list)) else a.shifts),
                                   0, total), out.shape)
    shifts = a.shifts if isinstance(a.shifts, (tuple, list)) else (a.shifts,)
    dims = a.dims if isinstance(a.dims, (tuple, list)) else (a.dims,)
    for shift, dim in zip(shifts, dims):
        d = axis(dim, len(shape))
        x = _roll_dim(b, x, int(shift), d, shape[d])
    return x


@export_rule("unfold")
def _unfold(b, op, a, out):
    """A ``Gather`` of every window's positions (a constant ``(windows, size)`` index), then the
    window axis moved last; the unfolded dimension must be static."""
    shape = a.input.meta.shape
    if not shape:
        raise unsupported(op, "a 0-d input", "unsqueeze it first")
    dim = axis(a.dimension, len(shape))
    length = concrete(op, "unfolded dimension", shape[dim])
    windows = (length - a.size) // a.step + 1
    index = np.arange(windows)[:, None] * a.step + np.arange(a.size)[None, :]
    gathered = b.op("Gather", a.input.name, b.const(index, _dt.int64), axis=dim)
    order = list(range(dim + 1)) + list(range(dim + 2, len(shape) + 1)) + [dim + 1]
    return b.op("Transpose", gathered, perm=order)
