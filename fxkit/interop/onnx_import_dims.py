"""Shape values item by item: ONNX shape arithmetic kept exact in rank and value.

Exporters compute shapes with ordinary tensor ops on ``Shape`` outputs:
``Gather`` picks a dim (a 0-d tensor), ``Unsqueeze`` makes it 1-D, ``Concat``
joins pieces, ``Mod``/``Div``/``Equal``/``Where`` adjust them (swin's window
padding, ``expand(-1)`` written as ``Where(Equal(shape, -1), 1, shape)``).
While every value stays a rank-0 or rank-1 integer or boolean tensor, the
importer keeps it as `Dims`, items that are Python ints/bools or graph nodes
computing them, so ``Reshape`` and ``Expand`` still receive shapes. Anything
else (a 2-D result, a float cast, a tensor partner) turns the `Dims` into a
tensor (`as_tensor`) and the ordinary rule runs.
"""
import operator

import numpy as np

from fxkit.interop.onnx_import_values import Const, Dims


def _trunc_div(a, b):
    """ONNX integer division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# ONNX op -> (the function on known items, the registry op on items computed in the graph)
ITEMWISE = {
    "Add": (operator.add, "add"), "Sub": (operator.sub, "sub"), "Mul": (operator.mul, "mul"),
    "Div": (_trunc_div, None), "Mod": (operator.mod, "remainder"), "Max": (max, "maximum"), "Min": (min, "minimum"),
    "Equal": (operator.eq, "eq"), "Less": (operator.lt, "lt"), "LessOrEqual": (operator.le, "le"),
    "Greater": (operator.gt, "gt"), "GreaterOrEqual": (operator.ge, "ge"),
    "And": (lambda a, b: a and b, "logical_and"), "Or": (lambda a, b: a or b, "logical_or"),
}


def known(item):
    return type(item) in (int, bool)


def dims_like(value):
    """Whether ``value`` is a shape value: `Dims`, or an integer/boolean constant of rank 0 or 1."""
    if isinstance(value, Dims):
        return True
    return isinstance(value, Const) and value.array.ndim <= 1 and value.array.dtype.kind in "iub"


def as_dims(value):
    """A `dims_like` value as `Dims` (constants become Python ints/bools)."""
    if isinstance(value, Dims):
        return value
    array = value.array
    return Dims([bool(v) if array.dtype.kind == "b" else int(v) for v in array.reshape(-1)],
                scalar=array.ndim == 0)


def _broadcast(sides):
    n = max(len(side) for side in sides)
    if any(len(side) not in (1, n) for side in sides):
        raise ValueError(f"shape values of lengths {[len(s) for s in sides]} do not broadcast")
    return [list(side) * n if len(side) == 1 else list(side) for side in sides]


def _call(c, op_name, *args):
    """``c.call`` on items, folded to a Python value where the shape rules know the result."""
    node = c.call(op_name, *args)
    value = c.importer.metas.get(node)
    return value if type(value) in (int, bool) else node


def _div_node(c, a, b):
    """Truncating integer division of graph items (floor division, corrected where signs differ)."""
    q = _call(c, "floor_divide", a, b)
    inexact = _call(c, "ne", _call(c, "remainder", a, b), 0)
    if inexact is False:
        return q
    signs_differ = _call(c, "ne", _call(c, "lt", a, 0), _call(c, "lt", b, 0))
    if signs_differ is False:
        return q
    return _call(c, "add", q, _call(c, "logical_and", inexact, signs_differ))


def _resolved(c, dims):
    """``dims`` with the items whose value the shape rules already know (a static size) as Python values."""
    metas = c.importer.metas
    items = [metas[d] if not known(d) and type(metas.get(d)) in (int, bool) else d for d in dims]
    return dims if items == list(dims) else Dims(items, scalar=dims.scalar)


def itemwise(c, op_type, values):
    """``op_type`` applied item by item to `dims_like` ``values``: a `Dims` (0-d when all inputs are)."""
    sides = [_resolved(c, as_dims(v)) for v in values]
    scalar = all(s.scalar for s in sides)
    columns = zip(*_broadcast(sides))
    if op_type == "Where":
        items = [a if cond is True else b if cond is False else
                 _call(c, "add", b, _call(c, "mul", _call(c, "sub", a, b), cond)) for cond, a, b in columns]
    elif op_type == "Not":
        items = [(not a) if known(a) else _call(c, "logical_not", a) for (a,) in columns]
    else:
        fn, op_name = ITEMWISE[op_type]
        items = []
        for a, b in columns:
            if known(a) and known(b):
                items.append(fn(a, b))
            else:
                items.append(_div_node(c, a, b) if op_type == "Div" else _call(c, op_name, a, b))
    return Dims([int(v) if isinstance(v, np.integer) else v for v in items], scalar=scalar)


_REDUCE = {"ReduceProd": "Mul", "ReduceSum": "Add", "ReduceMax": "Max", "ReduceMin": "Min"}
REDUCIBLE = frozenset(_REDUCE)


def reduce_items(c, op_type, dims, keepdims):
    """``ReduceProd``/``Sum``/``Max``/``Min`` over a 1-D shape value (``x.shape[1:].prod()``)."""
    fn, op_name = ITEMWISE[_REDUCE[op_type]]
    items = list(_resolved(c, dims))
    result = items[0]
    for item in items[1:]:
        result = fn(result, item) if known(result) and known(item) else _call(c, op_name, result, item)
    return Dims([result], scalar=not keepdims)


def wants_itemwise(c, op_type):
    """Whether the node ``c`` of ``op_type`` works on shape values only, with at least one `Dims`."""
    if op_type not in ITEMWISE and op_type not in ("Where", "Not"):
        return False
    values = [c.value(i) for i in range(c.n_inputs)]
    return any(isinstance(v, Dims) for v in values) and all(dims_like(v) for v in values)
