"""ONNX import rules of the writing index ops: ``ScatterElements`` (scatter,
scatter_add) and ``ScatterND`` (index_put with one index tensor per leading
dimension, split off the last axis of the ONNX indices)."""
from fxkit.interop.onnx_import_rules import import_rule, refuse

_SCATTER_REDUCE = {"none": None, "mul": "multiply"}


@import_rule("ScatterElements", "Scatter")
def _scatter_elements(c):
    reduction = c.attr("reduction", "none")
    x, dim, index, updates = c.tensor(0), c.attr("axis", 0), c.tensor(1), c.tensor(2)
    if reduction == "add":
        return c.call("scatter_add", x, dim, index, updates)
    if reduction not in _SCATTER_REDUCE:
        raise refuse(c, f"ScatterElements with reduction={reduction!r}")
    reduce = _SCATTER_REDUCE[reduction]
    return c.call("scatter", x, dim, index, updates, **({"reduce": reduce} if reduce else {}))


@import_rule("ScatterND")
def _scatter_nd(c):
    reduction = c.attr("reduction", "none")
    if reduction not in ("none", "add"):
        raise refuse(c, f"ScatterND with reduction={reduction!r}")
    shape = c.shape(1)
    if not shape or type(shape[-1]) is not int:
        raise refuse(c, "ScatterND whose indices have an unknown last dimension")
    indices = c.tensor(1)
    columns = tuple(c.call("getitem", indices, (Ellipsis, j)) for j in range(shape[-1]))
    return c.call("index_put", c.tensor(0), columns, c.tensor(2), reduction == "add")
