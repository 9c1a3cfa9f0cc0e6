"""`SplitBias`: a ``linear`` or ``conv2d`` read by elementwise ops leaves its bias add to them.

The matrix product stays one BLAS call; the bias add joins the elementwise
ops after it, so elementwise fusion makes ``gelu(x @ W.T + b)``'s pointwise
tail (bias add and GELU) one kernel instead of a separate add pass::

    before:                                        after:
    %linear = call[linear](%x, %w, %b)             %linear = call[linear](%x, %w)
    %gelu   = call[gelu](%linear)                  %add    = call[add](%linear, %b)
                                                   %gelu   = call[gelu](%add)

A convolution's bias (with a batch norm folded into it, `FoldConvBN`) becomes
the same add over a ``(C, 1, 1)`` constant, so a ResNet block's
``relu(conv(x) + b + identity)`` is one kernel pass over the conv's output:
the conv's epilogue (the kernel writes into the conv's buffer when the memory
plan finds it dead, `fxkit.backends.numba_backend`).

Values are unchanged: eager ``linear`` and ``conv2d`` add the bias to the
product in place, the same single rounding as the separate add. A product
whose result feeds anything else (a reshape, another matmul) keeps its bias.
Which ops split, and how their bias broadcasts, is the table `BIAS_SHAPES`,
keyed by registry op.
"""
import copy

from fxkit.graph import fetch_attr
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms import Pass

_ADD = get_op("add")

BIAS_SHAPES = {
    get_op("linear"): None,  # broadcasts over the last dim as it is
    get_op("conv2d"): (-1, 1, 1),  # over the channels of (N, C, H, W)
}
"""Registry op -> the shape its bias is reshaped to for the add (None: unchanged)."""
_BIAS_POSITION = 2
_PREFIX = "_split_bias_"


class SplitBias(Pass):
    """Move the bias of each op in `BIAS_SHAPES` read only by elementwise ops into an ``add``
    (see the module docstring)."""

    name = "split_bias"

    def __call__(self, gm):
        graph = gm.graph
        for node in list(graph.nodes):
            if node.op != "call" or node.target not in BIAS_SHAPES:
                continue
            bias = node.kwargs.get("bias", node.args[_BIAS_POSITION] if len(node.args) > _BIAS_POSITION else None)
            if bias is None or not node.users or not all(_elementwise(u) for u in node.users):
                continue
            shape = BIAS_SHAPES[node.target]
            if shape is not None:
                bias = _reshaped_constant(gm, bias, shape)
                if bias is None:
                    continue
            if len(node.args) > _BIAS_POSITION:
                node.args = node.args[:_BIAS_POSITION] + (None,) + node.args[_BIAS_POSITION + 1:]
            node.kwargs = {k: v for k, v in node.kwargs.items() if k != "bias"}
            with graph.inserting_after(node):
                add = graph.call(_ADD, (node, bias))
            add.meta = copy.copy(node.meta)
            node.replace_all_uses_with(add, delete_user_cb=lambda user: user is not add)
        return gm


# NOTE: the name the linear-only version of this pass had; the cupy backend uses it.
SplitLinearBias = SplitBias


def split_bias(gm):
    """Split the bias off each linear and conv feeding elementwise ops (see `SplitBias`); returns ``gm``."""
    return SplitBias()(gm)


split_linear_bias = split_bias


def _elementwise(node):
    target = node.target
    return node.op == "call" and isinstance(target, Op) and target.kind == "elementwise" and target.pure


def _reshaped_constant(gm, bias, shape):
    """A ``get_attr`` of ``bias``'s constant reshaped to ``shape``, or None when ``bias`` is no constant."""
    if getattr(bias, "op", None) != "get_attr":
        return None
    value = fetch_attr(gm, bias.target)
    if not isinstance(value, Tensor):
        return None
    reshaped = Tensor._make(value._data.reshape(shape), value.device)
    i = 0
    while hasattr(gm, f"{_PREFIX}{i}"):
        i += 1
    gm.register_buffer(f"{_PREFIX}{i}", reshaped)
    with gm.graph.inserting_after(bias):
        attr = gm.graph.get_attr(f"{_PREFIX}{i}")
    meta = bias.meta.get("tensor_meta")
    attr.meta = dict(bias.meta)
    if meta is not None:
        attr.meta["tensor_meta"] = TensorMeta(tuple(reshaped._data.shape), meta.dtype, meta.device)
    if "shape" in attr.meta:
        attr.meta["shape"] = tuple(reshaped._data.shape)
    return attr
