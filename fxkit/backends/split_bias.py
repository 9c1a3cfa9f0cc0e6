"""`SplitLinearBias`: ``linear(x, w, b)`` read by an elementwise op becomes ``linear(x, w) + b``.

The matrix product stays one BLAS call; the bias add joins the elementwise
ops after it, so elementwise fusion makes ``gelu(x @ W.T + b)``'s pointwise
tail (bias add and GELU) one kernel instead of a separate add pass::

    before:                                        after:
    %linear = call[linear](%x, %w, %b)             %linear = call[linear](%x, %w)
    %gelu   = call[gelu](%linear)                  %add    = call[add](%linear, %b)
                                                   %gelu   = call[gelu](%add)

Values are unchanged: eager ``linear`` adds the bias to the product in place,
the same single rounding as the separate add. A linear whose result feeds
anything else (a reshape, another matmul) keeps its bias.
"""
import copy

from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.transforms import Pass

_LINEAR = get_op("linear")
_ADD = get_op("add")


class SplitLinearBias(Pass):
    """Move the bias of each ``linear`` read only by elementwise ops into an ``add`` (see the module docstring)."""

    name = "split_linear_bias"

    def __call__(self, gm):
        graph = gm.graph
        for node in graph.find_nodes(op="call", target=_LINEAR):
            bias = node.kwargs.get("bias", node.args[2] if len(node.args) > 2 else None)
            if bias is None or not node.users or not all(_elementwise(u) for u in node.users):
                continue
            node.args = node.args[:2]
            node.kwargs = {k: v for k, v in node.kwargs.items() if k != "bias"}
            with graph.inserting_after(node):
                add = graph.call(_ADD, (node, bias))
            add.meta = copy.copy(node.meta)
            node.replace_all_uses_with(add, delete_user_cb=lambda user: user is not add)
        return gm


def split_linear_bias(gm):
    """Split the bias off each ``linear`` feeding elementwise ops (see `SplitLinearBias`); returns ``gm``."""
    return SplitLinearBias()(gm)


def _elementwise(node):
    target = node.target
    return node.op == "call" and isinstance(target, Op) and target.kind == "elementwise" and target.pure
