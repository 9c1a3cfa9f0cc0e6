"""ONNX export rules of the writing index ops: scatter, scatter_add (``ScatterElements``)
and index_put (``ScatterND``).

``ScatterElements`` wants ``updates`` of the index's shape: a larger ``src`` is
sliced to it (PyTorch reads only that block) and a ``value`` is expanded. For
``ScatterND`` the index tensors of the leading dimensions are broadcast and
stacked on a last axis, negative indices made positive with ``Mod``, and the
values expanded to the indexing result, as ``x[indices] = values`` reads them.
"""
from fxkit.interop.onnx_builder import Value
from fxkit.interop.onnx_rules import axis, export_rule, unsupported
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import broadcast_shapes

_REDUCTION = {None: "none", "add": "add", "multiply": "mul"}


def _updates(b, a, index, out, src, value):
    """``src`` cut to the index's shape, or ``value`` expanded to it."""
    shape = list(index.meta.shape)
    if src is None or not isinstance(src, Value):
        fill = value if src is None else src
        return b.op("Expand", b.scalar(fill, out.dtype), b.op("Shape", index.name))
    if [str(d) for d in src.meta.shape] == [str(d) for d in shape]:
        return src.name
    rank = len(shape)
    return b.op("Slice", src.name, b.ints([0] * rank), b.ints(shape), b.ints(list(range(rank))))


def _scatter_elements(b, op, a, out, src, value, reduction):
    if not out.shape:
        raise unsupported(op, "scattering into a 0-d tensor", "give the tensor a dimension with .reshape(1)")
    updates = _updates(b, a, a.index, out, src, value)
    return b.op("ScatterElements", a.input.name, a.index.name, updates, axis=axis(a.dim, len(out.shape)),
                **_reduction(b, op, reduction))


def _reduction(b, op, reduction):
    """The ``reduction`` attribute, which ONNX has from opset 16."""
    if reduction == "none":
        return {}
    if b.opset < 16:
        raise unsupported(op, f"reduction {reduction!r} at opset {b.opset}", "export with opset=16 or later")
    return {"reduction": reduction}


@export_rule("scatter")
def _scatter(b, op, a, out):
    return _scatter_elements(b, op, a, out, a.src, a.value, _REDUCTION[a.reduce])


@export_rule("scatter_add")
def _scatter_add(b, op, a, out):
    return _scatter_elements(b, op, a, out, a.src, None, "add")


@export_rule("index_put")
def _index_put(b, op, a, out):
    indices = list(a.indices)
    if any(not isinstance(i, Value) for i in indices):
        raise unsupported(op, "a None entry in indices (a whole leading dimension)",
                          "move the indexed dimensions first with .transpose() / .permute()")
    if any(i.meta.dtype is _dt.bool_ for i in indices):
        raise unsupported(op, "a boolean mask index (its number of elements depends on the data)",
                          "write fxkit.where(mask, values, x) instead")
    shape = out.shape
    joined = broadcast_shapes(*(tuple(i.meta.shape) for i in indices), op_name="index_put")
    columns = []
    for d, i in enumerate(indices):
        positive = b.op("Mod", b.cast(i, _dt.int64), b.dim_scalar(shape[d], _dt.int64), fmod=0)
        if [str(s) for s in i.meta.shape] != [str(s) for s in joined]:
            positive = b.op("Expand", positive, b.ints(joined))
        columns.append(b.op("Unsqueeze", positive, b.ints([-1])))
    stacked = columns[0] if len(columns) == 1 else b.op("Concat", *columns, axis=-1)
    target = list(joined) + list(shape[len(indices):])
    values = b.op("Expand", b.operand(a.values, out.dtype), b.ints(target))
    return b.op("ScatterND", a.input.name, stacked, values, **_reduction(b, op, "add" if a.accumulate else "none"))
