"""The derivative of ``scaled_dot_product_attention`` (the backward of PyTorch's math attention).

The attention weights are recomputed from the saved query and key (as the
normalisations recompute their statistics) with registry ops, so the rule runs
on graph values too. With ``dropout_p > 0`` eager recording runs a forward of
its own that keeps the dropout mask it drew (``ctx.extra``), drawing exactly as
the op does; a graph-level ``grad`` of such a call is refused (no graph form
keeps the mask yet).
"""
import math

from fxkit.errors import AutogradError
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.ops.attention import attend, attention_weights, check_inputs, draw_keep
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_where = get_op("where")
_ones_like = get_op("ones_like")
_softmax = get_op("softmax")
_bool = get_op("bool")
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _forward(op, args, kwargs):
    """The op's own computation, keeping the dropout mask (``dropout_p > 0``) for backward."""
    call = op.bind(args, kwargs)
    if not call["dropout_p"]:
        return op(*args, **kwargs), None
    q, k, v, mask = (call[name] for name in _PARAMS[:4])
    raw_mask = mask._data if isinstance(mask, Tensor) else mask
    check_inputs(q._data, k._data, v._data, raw_mask, call["dropout_p"], call["enable_gqa"], call["is_causal"])
    xp = q.device.xp
    weights = attention_weights(xp, q._data, k._data, raw_mask, call["is_causal"], call["scale"],
                                call["enable_gqa"])
    keep = draw_keep(xp, weights.shape, call["dropout_p"])
    heads = q.shape[-3] if call["enable_gqa"] else None
    out = attend(xp, weights, v._data, keep, call["dropout_p"], call["enable_gqa"], heads)
    return Tensor._make(out.astype(q._data.dtype, copy=False), q.device), Tensor._make(keep, q.device)


def _repeat(x, heads):
    """(..., Hkv, S, D) -> (..., heads, S, D), each head repeated ``heads // Hkv`` times in place."""
    if heads is None or heads == x.shape[-3]:
        return x
    hkv = x.shape[-3]
    shape = tuple(x.shape)
    grown = x.unsqueeze(-3).expand(shape[:-2] + (heads // hkv,) + shape[-2:])
    return grown.reshape(shape[:-3] + (heads,) + shape[-2:])


def _fold(g, heads, hkv):
    """The gradient of `_repeat`: the repeated heads' gradients summed back onto their head."""
    if heads is None or heads == hkv:
        return g
    shape = tuple(g.shape)
    return g.reshape(shape[:-3] + (hkv, heads // hkv) + shape[-2:]).sum(-3)


def _probabilities(query, key, attn_mask, is_causal, factor):
    """softmax of the masked, scaled scores; rows with every key masked are zeros."""
    scores = query.matmul(key.transpose(-2, -1)) * factor
    if attn_mask is not None and not attn_mask.dtype.name == "bool":
        scores = scores + attn_mask
    keep = None
    if is_causal:
        keep = _bool(_ones_like(scores)).tril()
    if attn_mask is not None and attn_mask.dtype.name == "bool":
        keep = attn_mask if keep is None else keep & attn_mask
    if keep is not None:
        scores = _where(keep, scores, float("-inf"))
    if keep is None and attn_mask is None:
        return _softmax(scores, -1)
    # NOTE: a row without an allowed key softmaxes zeros instead of -inf (no NaN), then is zeroed
    allowed = (scores > float("-inf")).any(-1, True)
    return _where(allowed, _softmax(_where(allowed, scores, 0.0), -1), 0.0)


@defgrad("scaled_dot_product_attention", saves=("query", "key", "value", "attn_mask"), forward=_forward)
def _scaled_dot_product_attention(ctx, g, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                  scale=None, enable_gqa=False):
    if dropout_p and ctx.extra is None:
        raise AutogradError("scaled_dot_product_attention: the gradient of a call with dropout_p > 0 needs the "
                            "dropout mask of its eager forward; compute it eagerly (loss.backward()) or pass "
                            "dropout_p=0.0 to fxkit.transforms.grad")
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    heads = query.shape[-3] if enable_gqa else None
    k, v = _repeat(key, heads), _repeat(value, heads)
    weights = _probabilities(query, k, attn_mask, is_causal, factor)
    dropped = weights
    if dropout_p:
        keep = ctx.extra * (1.0 / (1.0 - dropout_p)) if dropout_p < 1 else ctx.extra * 0.0
        dropped = weights * keep
    gq = gk = gv = gmask = None
    if ctx.needs(value):
        gv = _fold(dropped.transpose(-2, -1).matmul(g), heads, value.shape[-3] if enable_gqa else None)
    if ctx.needs(query) or ctx.needs(key) or (attn_mask is not None and ctx.needs(attn_mask)):
        g_weights = g.matmul(v.transpose(-2, -1))
        if dropout_p:
            g_weights = g_weights * keep
        g_scores = weights * (g_weights - (g_weights * weights).sum(-1, True))
        if ctx.needs(query):
            gq = g_scores.matmul(k) * factor
        if ctx.needs(key):
            gk = _fold(g_scores.transpose(-2, -1).matmul(query) * factor, heads,
                       key.shape[-3] if enable_gqa else None)
        if attn_mask is not None and ctx.needs(attn_mask):
            gmask = g_scores
    return gq, gk, gv, gmask
