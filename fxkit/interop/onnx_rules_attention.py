"""The ONNX export rule of ``scaled_dot_product_attention``: the composite it stands for.

ONNX has no attention operator before opset 23, so the op is written out as
``softmax(q @ k.T * scale + mask) @ v`` (what ``torch.onnx.export`` writes for
it too): GQA's shared key/value heads are repeated with ``Expand``, a causal
mask is a ``Trilu`` of ones, and rows with every key masked come out as zeros
(ONNX's ``Softmax`` gives NaN there), as the op gives. Export describes
inference: ``dropout_p > 0`` is refused with a hint, as dropout's rule does.
"""
import math

import numpy as np

from fxkit.interop.onnx_rules import concrete, export_rule, unsupported
from fxkit.runtime import dtypes as _dt


def _repeat_heads(b, op, x, heads):
    """``x`` (..., Hkv, S, D) with each head repeated to ``heads`` heads, in order."""
    shape = tuple(x.meta.shape)
    groups = concrete(op, "number of query heads", heads) // concrete(op, "number of key/value heads", shape[-3])
    if groups == 1:
        return x.name
    rank = len(shape)
    grown = b.op("Unsqueeze", x.name, b.const([rank - 2], _dt.int64))
    grown = b.op("Expand", grown, b.ints(shape[:-2] + (groups,) + shape[-2:]))
    return b.reshape(grown, shape[:-3] + (heads,) + shape[-2:])


def _causal(b, length, source):
    """The (L, S) bool mask of ``is_causal``: key j is kept for query i when j <= i."""
    if type(length) is int and type(source) is int:
        return b.const(np.tril(np.ones((length, source), dtype=bool)), _dt.bool_)
    ones = b.op("Expand", b.scalar(1, _dt.int64), b.ints((length, source)))
    return b.op("Cast", b.op("Trilu", ones, upper=0), to=9)  # BOOL


@export_rule("scaled_dot_product_attention")
def _scaled_dot_product_attention(b, op, a, out):
    if a.dropout_p:
        raise unsupported(op, f"dropout_p={a.dropout_p} (random)",
                          "export the model in eval mode, which passes dropout_p=0.0")
    q, k, v = a.query, a.key, a.value
    features = concrete(op, "feature size", q.meta.shape[-1])
    factor = 1.0 / math.sqrt(features) if a.scale is None else float(a.scale)
    key, value = k.name, v.name
    if a.enable_gqa:
        heads = q.meta.shape[-3]
        key, value = _repeat_heads(b, op, k, heads), _repeat_heads(b, op, v, heads)
    rank = len(k.meta.shape)
    transposed = b.op("Transpose", key, perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    scores = b.op("Mul", b.op("MatMul", q.name, transposed), b.scalar(factor, out.dtype))
    length, source = q.meta.shape[-2], k.meta.shape[-2]
    keep = _causal(b, length, source) if a.is_causal else None
    mask = a.attn_mask
    masked = keep is not None or mask is not None
    if mask is not None and mask.meta.dtype is _dt.bool_:
        keep = mask.name if keep is None else b.op("And", keep, mask.name)
    elif mask is not None:
        scores = b.op("Add", scores, mask.name)
    if keep is not None:
        scores = b.op("Where", keep, scores, b.scalar(-np.inf, out.dtype))
    weights = b.op("Softmax", scores, axis=-1)
    if masked:  # a row without an allowed key: NaN from Softmax, zeros from the op
        weights = b.op("Where", b.op("IsNaN", weights), b.scalar(0.0, out.dtype), weights)
    return b.op("MatMul", weights, value)
