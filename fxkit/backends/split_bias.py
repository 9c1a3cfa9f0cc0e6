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


def rejoin_linear_biases(graph):
    """Give each ``linear(x, w)`` read only by ``add(linear, b)`` of a 1-D ``b`` its bias back.

    The split pays only when the add joins a fused kernel; a backend that then keeps numpy's ops
    for the group (its cost model chose so) would run the add as a pass of its own, where the
    registry's ``linear`` adds the bias to the fresh product inside its call (the zoo's MLP at
    batch 1: 34 against 32.6 us a forward). Values are unchanged, as for the split.
    """
    for add in list(graph.find_nodes(op="call", target=_ADD)):
        linear, bias = (add.args + (None, None))[:2]
        if (add.kwargs or getattr(linear, "target", None) is not _LINEAR or len(linear.args) != 2
                or linear.kwargs or set(linear.users) != {add} or getattr(bias, "op", None) != "get_attr"):
            continue
        bias_meta, out_meta = bias.meta.get("tensor_meta"), linear.meta.get("tensor_meta")
        if (getattr(bias_meta, "shape", None) is None or getattr(out_meta, "shape", None) is None
                or tuple(bias_meta.shape) != tuple(out_meta.shape[-1:]) or bias_meta.dtype != out_meta.dtype):
            continue
        linear.args = linear.args + (bias,)
        add.replace_all_uses_with(linear)
        graph.erase_node(add)


def _elementwise(node):
    target = node.target
    return node.op == "call" and isinstance(target, Op) and target.kind == "elementwise" and target.pure
