"""How the numba backend runs ``linear``: one BLAS product against the weight packed as ``(in, out)``.

The registry's ``linear`` multiplies by ``weight.T``, a transposed view of
PyTorch's ``(out_features, in_features)`` layout: no copy, but OpenBLAS then
packs the transposed operand on every call, which costs most where the rows
are few (a ViT's 17 tokens, a transformer block's 64): the same product
against the weight stored ``(in_features, out_features)`` C-contiguous took
0.70x the time at ``(17, 3072) @ (3072, 768)`` and 0.77x at
``(64, 128) @ (128, 512)`` (one thread, minimum of 30 runs), and 0.87x to
1.0x at 136 rows and more. `LinearCall` keeps that copy of each parameter
weight, made on the first call and again after any tensor was written in
place (`WRITES`: an optimizer step may have changed the weight), as the conv
rules keep their packed weights (`fxkit.backends.conv_lowering`).

`LINEAR_RULES` maps the registry op to its rule, as `CONV_RULES` does for
``conv2d``. The rule takes a ``linear`` whose weight is a 2-D float32 or
float64 parameter or buffer (a ``get_attr``) and whose input has at least
one dimension; a weight computed at run time would be copied on every call,
so such a node keeps the registry op.
"""
import math

import numpy as np

from fxkit.backends.cost_model import Decision
from fxkit.runtime.autograd.autograd_meta import WRITES
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op

_FLOATS = ("float32", "float64")


class LinearCall:
    """``linear(input, weight[, bias])`` on raw arrays, the weight read from its ``(in, out)`` copy.

    Args:
        name: the name generated code calls it by.
    """

    __slots__ = ("__name__", "_weight", "_writes", "_packed")

    def __init__(self, name):
        self.__name__ = name
        self._weight, self._writes, self._packed = None, None, None

    def __call__(self, input, weight, bias=None):  # noqa: A002
        if self._weight is not weight or self._writes != WRITES[0]:
            self._weight, self._writes, self._packed = weight, WRITES[0], np.ascontiguousarray(weight.T)
        # NOTE: more than 2 dims run as one (rows, in_features) product (see the registry's linear).
        rows = input.reshape(math.prod(input.shape[:-1]), input.shape[-1]) if input.ndim != 2 else input
        out = np.matmul(rows, self._packed)
        if input.ndim != 2:
            out = out.reshape(input.shape[:-1] + (weight.shape[0],))
        if bias is not None:
            out += bias
        return out

    def __repr__(self):
        return f"<LinearCall {self.__name__}>"


def lower_linear(node):
    """``(LinearCall or None, Decision)`` for a ``linear`` node (see the module docstring).

    A node it takes gets its bias as a third positional argument (generated code
    passes a call its node's positional arguments only).
    """
    given = dict(zip(("input", "weight", "bias"), node.args), **node.kwargs)
    weight, bias = given.get("weight"), given.get("bias")
    metas = [getattr(given.get(k), "meta", {}).get("tensor_meta") for k in ("input", "weight")]
    reason = None
    if set(given) - {"input", "weight", "bias"}:
        reason = "unexpected keyword arguments"
    elif not all(isinstance(m, TensorMeta) for m in metas):
        reason = "an operand's metadata is unknown"
    elif getattr(weight, "op", None) != "get_attr":
        reason = "the weight is computed at run time (its (in, out) copy would be made every call)"
    elif len(metas[1].shape) != 2 or len(metas[0].shape) < 1:
        reason = f"a {len(metas[1].shape)}-D weight or a 0-d input"
    elif metas[0].dtype.name not in _FLOATS or metas[1].dtype.name != metas[0].dtype.name:
        reason = f"{metas[0].dtype.name} input and {metas[1].dtype.name} weight (the rule takes float32/float64)"
    if reason is not None:
        return None, Decision(node.name, "numpy linear", reason)
    node.args = (given["input"], weight) + ((bias,) if bias is not None else ())
    node.kwargs = {}
    call = LinearCall(f"{node.name}_packed")
    out_features, in_features = metas[1].shape
    return call, Decision(node.name, f"BLAS product {call.__name__}",
                          f"weight kept as ({in_features}, {out_features}) C-contiguous: OpenBLAS packs a "
                          f"transposed operand on every call")


LINEAR_RULES = {get_op("linear"): lower_linear}
"""Registry op -> ``rule(node) -> (call or None, Decision)``: how the numba backend runs that op."""
