"""ONNX import rules of constants, shapes, views, indexing and joining.

These ops work on three kinds of values: graph nodes (tensors), constants
(folded with numpy while importing, so an initializer reshaped or gathered
stays one constant) and `Dims` (shapes, Python values in the graph).
"""
import numpy as np

from fxkit.errors import GraphError
from fxkit.interop.onnx_import_values import Const, Dims
from fxkit.interop.onnx_import_dims import as_dims, dims_like
from fxkit.interop.onnx_import_rules import import_rule, refuse
from fxkit.runtime import dtypes as _dt

_INT64_MAX = np.iinfo(np.int64).max


def _norm(axis, rank):
    return axis + rank if axis < 0 else axis


def _axes(c, i):
    """Axes from input ``i`` (opset 13+) or the ``axes`` attribute."""
    axes = c.attr("axes")
    if axes is None and c.value(i) is not None:
        axes = c.ints(i)
    return None if axes is None else [int(a) for a in axes]


@import_rule("Constant")
def _constant(c):
    import onnx

    if "value" in c.attrs:
        return c.const_value(onnx.numpy_helper.to_array(c.attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in c.attrs:
            return c.const_value(np.asarray(c.attrs[key], dtype=dtype))
    raise refuse(c, f"a Constant given as {', '.join(c.attrs)}")


@import_rule("ConstantOfShape")
def _constant_of_shape(c):
    import onnx

    fill = onnx.numpy_helper.to_array(c.attrs["value"]) if "value" in c.attrs else np.zeros(1, np.float32)
    dims = c.ints(0)
    if all(type(d) is int for d in dims):
        c.reserve(dims, fill.dtype)
        return c.const_value(np.full(dims, fill.reshape(-1)[0], dtype=fill.dtype))
    return c.call("full", dims, fill.reshape(-1)[0].item(), dtype=_dt.from_numpy(fill.dtype))


@import_rule("Shape")
def _shape(c):
    value = c.value(0)
    if isinstance(value, Dims):
        return Dims([] if value.scalar else [len(value)])
    shape = c.shape(0)
    if shape is None:
        raise GraphError("the rank of its input is unknown; add shape information to the model")
    rank = len(shape)
    start, end = _norm(c.attr("start", 0), rank), c.attr("end")
    end = rank if end is None else min(_norm(end, rank), rank)
    x = None if isinstance(value, Const) or all(d is not None for d in shape[start:end]) else c.tensor(0)
    return Dims([shape[i] if shape[i] is not None else c.call("size", x, i) for i in range(start, end)])


@import_rule("Reshape")
def _reshape(c):
    dims = c.ints(1)
    value = c.value(0)
    if isinstance(value, Dims) and all(type(d) is int for d in dims):
        if dims == [] and len(value) == 1:
            return Dims(value, scalar=True)
        if len(dims) == 1 and dims[0] in (-1, len(value)):
            return Dims(value)
    if 0 in dims and not c.attr("allowzero", 0):  # 0 copies the input's dim
        shape = c.shape(0) or []
        dims = [(shape[i] if i < len(shape) and shape[i] is not None else c.call("size", c.tensor(0), i))
                if d == 0 else d for i, d in enumerate(dims)]
    if isinstance(value, Const) and all(type(d) is int for d in dims):
        return c.const_value(value.array.reshape(dims))
    result = c.call("reshape", c.tensor(0), *dims)
    if not c.eager:
        c.importer.ranks[result] = len(dims)  # known even where the sizes are not
    return result


@import_rule("Flatten")
def _flatten(c):
    axis = c.attr("axis", 1)
    x = c.tensor(0)
    if axis == 0:
        return c.call("reshape", x, 1, -1)
    rank = c.rank(0)
    if axis < 0:
        axis += rank
    if axis == rank:  # valid ONNX: every dim goes to the rows, the columns are 1
        return c.call("reshape", x, -1, 1)
    flat = c.call("flatten", x, axis)
    return flat if axis == 1 else c.call("flatten", flat, 0, axis - 1)


@import_rule("Transpose")
def _transpose(c):
    perm = c.attr("perm")
    value = c.value(0)
    if perm is None:
        perm = list(reversed(range(c.rank(0))))
    if isinstance(value, Const):
        return c.const_value(np.transpose(value.array, perm))
    return c.call("permute", c.tensor(0), *perm)


@import_rule("Squeeze")
def _squeeze(c):
    axes = _axes(c, 1)
    value = c.value(0)
    if isinstance(value, Dims) and len(value) == 1 and not value.scalar and axes in (None, [0], [-1]):
        return Dims(value, scalar=True)
    if isinstance(value, Dims) and value.scalar and not axes:
        return value
    if axes is None:
        return c.call("squeeze", c.tensor(0))
    rank = c.rank(0)
    x = c.tensor(0)
    for a in sorted((_norm(a, rank) for a in axes), reverse=True):
        x = c.call("squeeze", x, a)
    return x


@import_rule("Unsqueeze")
def _unsqueeze(c):
    axes = _axes(c, 1)
    value = c.value(0)
    if isinstance(value, Dims) and value.scalar and axes in ([0], [-1]):
        return Dims(value)  # a 0-d dim made 1-D; a further Unsqueeze leaves the shape values
    if isinstance(value, Const):
        return c.const_value(np.expand_dims(value.array, tuple(axes)))
    rank = c.rank(0) + len(axes)
    x = c.tensor(0)
    for a in sorted(_norm(a, rank) for a in axes):
        x = c.call("unsqueeze", x, a)
    return x


@import_rule("Concat")
def _concat(c):
    values = [c.value(i) for i in range(c.n_inputs)]
    if any(isinstance(v, Dims) for v in values) and all(
            dims_like(v) and not getattr(as_dims(v), "scalar", False) for v in values):
        return Dims([d for v in values for d in as_dims(v)])
    if all(isinstance(v, Const) for v in values):
        return c.const_value(np.concatenate([v.array for v in values], axis=c.attr("axis")))
    return c.call("cat", [c.tensor(i) for i in range(c.n_inputs)], c.attr("axis"))


@import_rule("Split")
def _split(c):
    axis = c.attr("axis", 0)
    sizes = c.attr("split")
    if sizes is None and c.value(1) is not None:
        sizes = c.ints(1)
    outputs = len(c.proto.output)
    if sizes is None:
        shape = c.shape(0)
        total = shape[axis] if shape is not None else None
        if total is None:
            parts = c.call("chunk", c.tensor(0), outputs, axis)
            return [c.call("getitem", parts, i) for i in range(outputs)]
        step = -(-total // outputs)
        sizes = [min(step, total - i * step) for i in range(outputs)]
    parts = c.call("split", c.tensor(0), list(sizes), axis)
    return [c.call("getitem", parts, i) for i in range(outputs)]


@import_rule("Slice")
def _slice(c):
    if c.opset < 10:
        raise refuse(c, "Slice before opset 10")
    starts, ends = c.ints(1), c.ints(2)
    axes = c.ints(3) if c.value(3) is not None else list(range(len(starts)))
    steps = c.ints(4) if c.value(4) is not None else [1] * len(starts)
    value = c.value(0)
    if isinstance(value, (Dims, Const)) and all(type(v) is int for v in starts + ends + steps):
        if isinstance(value, Dims):
            return Dims(value[slice(starts[0], None if ends[0] >= _INT64_MAX else ends[0], steps[0])])
        index = [slice(None)] * value.array.ndim
        for a, s, e, t in zip(axes, starts, ends, steps):
            index[a] = slice(s, e, t)
        return c.const_value(value.array[tuple(index)])
    rank = c.rank(0)
    index = [slice(None)] * rank
    flips = []
    for a, s, e, t in zip(axes, starts, ends, steps):
        a = _norm(a, rank)
        if t == -1 and (s == -1 or s >= _INT64_MAX) and type(e) is int and e <= -_INT64_MAX:
            flips.append(a)  # a whole reversed dimension: torch has no negative steps, flip has
            continue
        if type(t) is not int or t < 1:
            raise refuse(c, f"Slice with step {t}")
        stop = None if type(e) is int and e >= _INT64_MAX else e
        index[a] = slice(s if s != 0 else None, stop, t if t != 1 else None)
    x = c.tensor(0)
    if any(i != slice(None) for i in index):
        x = c.call("getitem", x, tuple(index))
    return c.call("flip", x, flips) if flips else x


@import_rule("Gather")
def _gather(c):
    axis = c.attr("axis", 0)
    value, indices = c.value(0), c.value(1)
    if isinstance(value, Dims) and not value.scalar and isinstance(indices, Const) and indices.array.ndim <= 1:
        picked = indices.array
        items = [value[int(i)] for i in picked.reshape(-1)]
        return Dims(items, scalar=picked.ndim == 0)
    if isinstance(value, Const) and isinstance(indices, Const):
        return c.const_value(np.take(value.array, indices.array, axis=axis))
    if isinstance(indices, Const) and indices.array.ndim == 0:
        rank = c.rank(0)
        return c.call("getitem", c.tensor(0), (slice(None),) * _norm(axis, rank) + (int(indices.array),))
    if isinstance(indices, Const) and indices.array.ndim == 1:
        return c.call("index_select", c.tensor(0), axis, c.tensor(1))
    shape = c.shape(0)
    if axis == 0 and shape is not None and len(shape) == 2:
        return c.call("embedding", c.tensor(1), c.tensor(0))  # a lookup table: Gather(weight, ids)
    return _gather_any(c, axis, shape)


def _gather_any(c, axis, shape):
    """Gather with computed indices of any rank: ``index_select`` of the flattened indices (negative
    ones wrapped), reshaped to ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``."""
    index_shape = c.shape(1)
    if shape is None or index_shape is None:
        raise refuse(c, "Gather with computed indices of unknown rank")
    axis = _norm(axis, len(shape))
    x, indices = c.tensor(0), c.tensor(1)
    sizes = [d if d is not None else c.call("size", x, i) for i, d in enumerate(shape)]
    index_sizes = [d if d is not None else c.call("size", indices, i) for i, d in enumerate(index_shape)]
    flat = c.call("remainder", c.call("reshape", indices, -1), sizes[axis])
    picked = c.call("index_select", x, axis, flat)
    return c.call("reshape", picked, *sizes[:axis], *index_sizes, *sizes[axis + 1:])


@import_rule("GatherElements")
def _gather_elements(c):
    return c.call("gather", c.tensor(0), c.attr("axis", 0), c.tensor(1))


@import_rule("Expand")
def _expand(c):
    dims = c.ints(1)
    rank = c.rank(0)
    offset = len(dims) - rank
    if offset < 0:
        dims = [1] * -offset + dims
        offset = 0
    # A 1 in the target keeps the input's dim (bidirectional broadcasting); -1 says so to expand.
    sizes = [-1 if (type(d) is int and d == 1 and i >= offset) else d for i, d in enumerate(dims)]
    return c.call("expand", c.tensor(0), *sizes)


@import_rule("Tile")
def _tile(c):
    return c.call("repeat", c.tensor(0), *c.ints(1))


@import_rule("Range")
def _range(c):
    start, limit, delta = (c.scalar(i) for i in range(3))
    dtype = c.dtype(0) or _dt.int64
    if isinstance(delta, (int, float)) and delta == 0:
        raise GraphError(f"Range with delta 0 (start {start}, limit {limit}) never reaches its limit; the model "
                         f"is malformed")
    if all(isinstance(v, (int, float)) for v in (start, limit, delta)):
        c.reserve((max(0, int(np.ceil((limit - start) / delta))),), dtype.np)
        return c.const_value(np.arange(start, limit, delta, dtype=dtype.np))
    return c.call("arange", start, limit, delta, dtype=dtype)


@import_rule("Pad")
def _pad(c):
    pads = c.ints(1)
    rank = len(pads) // 2
    axes = c.ints(3) if c.value(3) is not None else list(range(rank))
    begins, ends = pads[:rank], pads[rank:]
    full_rank = c.rank(0)
    per_dim = {_norm(a, full_rank): (b, e) for a, b, e in zip(axes, begins, ends)}
    last = max((a for a, (b, e) in per_dim.items() if b or e), default=full_rank - 1)
    torch_pads = []
    for a in range(full_rank - 1, min(per_dim, default=last) - 1, -1):
        torch_pads += list(per_dim.get(a, (0, 0)))
    mode = c.attr("mode", "constant")
    modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
    if mode not in modes:
        raise refuse(c, f"Pad mode {mode!r}")
    value = c.scalar(2) if c.value(2) is not None else None
    return c.call("pad", c.tensor(0), torch_pads, modes[mode], value)


@import_rule("Size")
def _size(c):
    return Dims([c.call("numel", c.tensor(0))], scalar=True)


@import_rule("CastLike")
def _cast_like(c):
    dtype = c.dtype(1)
    if dtype is None:
        raise GraphError("the dtype of its second input is unknown")
    return c.call("to", c.tensor(0), dtype=dtype)

