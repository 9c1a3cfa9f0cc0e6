"""``scaled_dot_product_attention``: ``softmax(q @ k.T * scale + mask) @ v`` as one op.

The signature is ``torch.nn.functional.scaled_dot_product_attention``'s, and so
are the semantics: a bool ``attn_mask`` keeps the positions that are True, a
float one is added to the scores; ``is_causal`` keeps key ``j <= i`` for query
``i`` (aligned top-left when ``L != S``; not together with ``attn_mask``, as
in PyTorch); a row with every key masked gives zeros (PyTorch's safe softmax),
not NaN; ``dropout_p`` drops attention weights whenever it is above 0 (callers
pass ``dropout_p=p if training else 0.0``, as PyTorch's layers do);
``enable_gqa`` lets ``Hq`` query heads share ``Hkv`` key/value heads
(``Hq % Hkv == 0``), as if ``repeat_interleave`` had copied them. One op, not
its decomposition, so a graph keeps attention as one node (the cost model
counts its two matmuls; ONNX export writes the composite).
"""
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op
from fxkit.runtime.ops.factories import generator
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND
from fxkit.runtime.ops.nn_checks import check_probability, dims_differ, dtype_of, shown


def check_inputs(query, key, value, attn_mask, dropout_p, enable_gqa, is_causal=False):
    """The shared checks of the op and its shape rule; returns ``(L, S)``."""
    name = "scaled_dot_product_attention"
    if is_causal and attn_mask is not None:
        raise ShapeError(f"{name}: an explicit attn_mask should not be set when is_causal=True (as in PyTorch); "
                         f"pass one of them (combine a causal mask into attn_mask yourself)")
    for t, what in ((query, "query"), (key, "key"), (value, "value")):
        if len(t.shape) < 2:
            raise ShapeError(f"{name}: {what} must have at least 2 dims (..., length, features), got shape "
                             f"{shown(t.shape)}")
        if not dtype_of(t).is_floating_point:
            raise DTypeError(f"{name}: expected a floating-point {what}, got {dtype_of(t).name}; cast it first, "
                             f"e.g. {what}.float()")
    if dtype_of(key) is not dtype_of(query) or dtype_of(value) is not dtype_of(query):
        raise DTypeError(f"{name}: expected query, key and value of one dtype, got {dtype_of(query).name}, "
                         f"{dtype_of(key).name} and {dtype_of(value).name}")
    if dims_differ(query.shape[-1], key.shape[-1]):
        raise ShapeError(f"{name}: query and key must have the same feature size, got query {shown(query.shape)} "
                         f"and key {shown(key.shape)}")
    if dims_differ(key.shape[-2], value.shape[-2]):
        raise ShapeError(f"{name}: key and value must have the same length, got key {shown(key.shape)} and value "
                         f"{shown(value.shape)}")
    check_probability(name, dropout_p)
    if enable_gqa:
        if len(query.shape) < 3 or len(key.shape) < 3 or len(value.shape) < 3:
            raise ShapeError(f"{name}: enable_gqa=True needs (..., heads, length, features) inputs, got query "
                             f"{shown(query.shape)}")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if all(isinstance(h, int) for h in (hq, hk, hv)) and (hk != hv or hk == 0 or hq % hk):
            raise ShapeError(f"{name}: enable_gqa=True needs the query heads ({hq}) to be a multiple of the key "
                             f"and value heads ({hk}, {hv})")
    if attn_mask is not None:
        if len(attn_mask.shape) < 2:
            raise ShapeError(f"{name}: attn_mask must have at least 2 dims (..., L, S), got shape "
                             f"{shown(attn_mask.shape)}")
        mask_dtype = dtype_of(attn_mask)
        if mask_dtype.name != "bool" and mask_dtype is not dtype_of(query):
            raise DTypeError(f"{name}: attn_mask must be bool or of the query's dtype ({dtype_of(query).name}), "
                             f"got {mask_dtype.name}")
    return query.shape[-2], key.shape[-2]


def _head_shapes(query, key, value, enable_gqa):
    """The batch shapes of key and value as the query sees them (GQA heads repeated)."""
    if not enable_gqa:
        return key.shape[:-2], value.shape[:-2]
    hq = query.shape[-3]
    return (tuple(key.shape[:-3]) + (hq,), tuple(value.shape[:-3]) + (hq,))


def _batch_shape(query, key, value, attn_mask, enable_gqa, length, source):
    """The output's leading dims: query's, key's and value's broadcast (heads repeated under GQA)."""
    k_batch, v_batch = _head_shapes(query, key, value, enable_gqa)
    try:
        batch = broadcast_shapes(tuple(query.shape[:-2]), tuple(k_batch), tuple(v_batch),
                                 op_name="scaled_dot_product_attention")
    except ShapeError as exc:
        hint = "; for fewer key/value heads than query heads pass enable_gqa=True" if not enable_gqa else ""
        raise ShapeError(f"{exc.args[0]} (the leading dims of query {shown(query.shape)}, key {shown(key.shape)} "
                         f"and value {shown(value.shape)}){hint}") from None
    if attn_mask is not None:
        broadcast_shapes(tuple(attn_mask.shape), tuple(batch) + (length, source),
                         op_name="scaled_dot_product_attention (attn_mask)")
    return tuple(batch)


def _rule(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    length, source = check_inputs(query, key, value, attn_mask, dropout_p, enable_gqa, is_causal)
    batch = _batch_shape(query, key, value, attn_mask, enable_gqa, length, source)
    return TensorMeta(batch + (length, value.shape[-1]), query.dtype, query.device)


def repeat_heads(xp, x, heads):
    """``x`` (..., Hkv, S, D) with each head repeated to ``heads`` heads (GQA)."""
    groups = heads // x.shape[-3]
    return x if groups == 1 else xp.repeat(x, groups, axis=-3)


def attention_weights(xp, query, key, attn_mask, is_causal, scale, enable_gqa):
    """``softmax(q @ k.T * scale + mask)`` in the query's dtype (float32 for half types):
    the probabilities the values are averaged with; fully masked rows are zeros."""
    if enable_gqa:
        key = repeat_heads(xp, key, query.shape[-3])
    if query.dtype.itemsize < 4 or query.dtype.kind == BFLOAT16_KIND:
        query, key = query.astype(np.float32), key.astype(np.float32)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = xp.matmul(query, xp.swapaxes(key, -1, -2))
    scores *= factor
    length, source = scores.shape[-2:]
    keep = None
    if is_causal:
        keep = xp.tril(xp.ones((length, source), dtype=bool))
    if attn_mask is not None:
        if attn_mask.dtype.kind == "b":
            keep = attn_mask if keep is None else xp.logical_and(keep, attn_mask)
        else:
            scores = scores + attn_mask.astype(scores.dtype, copy=False)
    if keep is not None:
        scores = xp.where(keep, scores, -np.inf)
    top = xp.amax(scores, axis=-1, keepdims=True)
    top = xp.where(top == -np.inf, 0, top)  # a fully masked row: exp(-inf) is 0 everywhere
    scores -= top
    xp.exp(scores, out=scores)
    total = xp.sum(scores, axis=-1, keepdims=True)
    total = xp.where(total == 0, 1, total)
    scores /= total
    return scores


def draw_keep(xp, shape, dropout_p):
    """The dropout mask of the weights: True where a weight is kept (the dropout op's draw)."""
    return generator(xp).random(shape, dtype=np.float32) >= dropout_p


def attend(xp, weights, value, keep, dropout_p, enable_gqa, heads):
    """``dropout(weights) @ value`` (``keep`` is the dropout mask or None)."""
    if keep is not None:
        weights = weights * keep
        if dropout_p < 1:  # p == 1 keeps nothing: the weights stay zero
            weights *= 1.0 / (1.0 - dropout_p)
    if enable_gqa:
        value = repeat_heads(xp, value, heads)
    return xp.matmul(weights, value.astype(weights.dtype, copy=False))


@op("scaled_dot_product_attention", kind="matmul", method=False, shape_rule=_rule)
def scaled_dot_product_attention(xp, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """Attention of ``query`` (..., L, E) over ``key`` (..., S, E) and ``value`` (..., S, Ev): (..., L, Ev).

    Args:
        attn_mask: bool (True: attend) or float (added to the scores), broadcastable to (..., L, S).
        dropout_p: dropout probability on the attention weights (applied whenever above 0).
        is_causal: mask out keys after each query position.
        scale: the scores' factor; None is ``1 / sqrt(E)``.
        enable_gqa: share key/value heads among groups of query heads (dim -3).

    Example:
        >>> out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # q, k, v: (N, H, L, D)
    """
    length, source = check_inputs(query, key, value, attn_mask, dropout_p, enable_gqa, is_causal)
    _batch_shape(query, key, value, attn_mask, enable_gqa, length, source)
    weights = attention_weights(xp, query, key, attn_mask, is_causal, scale, enable_gqa)
    keep = draw_keep(xp, weights.shape, dropout_p) if dropout_p > 0 else None
    heads = query.shape[-3] if enable_gqa else None
    out = attend(xp, weights, value, keep, dropout_p, enable_gqa, heads)
    return out.astype(query.dtype, copy=False)
