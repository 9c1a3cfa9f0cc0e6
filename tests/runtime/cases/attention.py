"""Cases for fxkit/runtime/ops/attention.py: scaled_dot_product_attention."""
import numpy as np

from tests.runtime.opcheck import case, randf, torch_ref

TOL = {"rtol": 1e-5, "atol": 1e-6}


def sdpa_ref(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Attention in float64, written from the definition: fully masked rows give zeros."""
    if enable_gqa:
        key = np.repeat(key, query.shape[-3] // key.shape[-3], axis=-3)
        value = np.repeat(value, query.shape[-3] // value.shape[-3], axis=-3)
    factor = 1 / np.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ np.swapaxes(key, -1, -2) * factor
    length, source = scores.shape[-2:]
    allowed = np.ones(scores.shape, bool)
    if is_causal:
        allowed &= np.tril(np.ones((length, source), bool))
    if attn_mask is not None and attn_mask.dtype == bool:
        allowed &= attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = weights.sum(-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    return weights @ value


def _qkv(r, n=2, heads=3, length=4, source=5, dim=8, value_dim=6, kv_heads=None, dtype=np.float32):
    kv_heads = heads if kv_heads is None else kv_heads
    return (randf(r, n, heads, length, dim, dtype=dtype), randf(r, n, kv_heads, source, dim, dtype=dtype),
            randf(r, n, kv_heads, source, value_dim, dtype=dtype))


def _torch_sdpa(*args, **kwargs):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(*args, **kwargs)


def _bool_mask(r, *shape):
    mask = r.random(shape) < 0.7
    mask[..., 0] = True
    return mask


def _fully_masked_row(r):
    mask = _bool_mask(r, 4, 5)
    mask[2] = False
    return mask


for _ref, _tag in ((sdpa_ref, ""), (torch_ref(_torch_sdpa), "_torch")):
    case("scaled_dot_product_attention", lambda r: (_qkv(r), {}), _ref, id="basic" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r, length=5), {"is_causal": True}), _ref,
         id="causal" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r, length=6, source=3), {"is_causal": True}), _ref,
         id="causal-longer-query" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r), {"attn_mask": _bool_mask(r, 4, 5)}), _ref,
         id="bool-mask" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r), {"attn_mask": _fully_masked_row(r)}), _ref,
         id="fully-masked-row-is-zero" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r), {"attn_mask": randf(r, 2, 1, 4, 5)}), _ref,
         id="float-mask-broadcast" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r), {"scale": 0.3}), _ref, id="scale" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r, heads=4, kv_heads=2), {"enable_gqa": True}), _ref,
         id="gqa" + _tag, **TOL)
    case("scaled_dot_product_attention",
         lambda r: (_qkv(r, heads=6, kv_heads=2, length=5, source=5), {"enable_gqa": True, "is_causal": True}),
         _ref, id="gqa-causal" + _tag, **TOL)
    case("scaled_dot_product_attention", lambda r: (_qkv(r, dtype=np.float64), {"attn_mask": _bool_mask(r, 4, 5)}),
         _ref, id="float64" + _tag, rtol=1e-12, atol=1e-14)
case("scaled_dot_product_attention", lambda r: ((randf(r, 4, 8), randf(r, 5, 8), randf(r, 5, 3)), {}), sdpa_ref,
     id="2d", **TOL)
case("scaled_dot_product_attention", lambda r: ((randf(r, 2, 4, 8), randf(r, 2, 5, 8), randf(r, 2, 5, 3)),
                                               {"attn_mask": _bool_mask(r, 4, 5)}),
     sdpa_ref, id="3d-mask", **TOL)
def _noncontiguous(r):
    """q, k, v laid out as (N, L, H, D) in memory, seen as (N, H, L, D)."""
    return tuple(np.swapaxes(np.swapaxes(x, 1, 2).copy(), 1, 2) for x in _qkv(r)), {}


case("scaled_dot_product_attention", _noncontiguous, sdpa_ref, id="noncontiguous", **TOL)
case("scaled_dot_product_attention", lambda r: (_qkv(r, dtype=np.float16), {}), sdpa_ref, id="float16",
     rtol=3e-3, atol=3e-3)
case("scaled_dot_product_attention", lambda r: (_qkv(r), {"dropout_p": 1.0}), lambda *a, **k: np.zeros((2, 3, 4, 6)),
     id="dropout-everything")


def _dropout_keeps_the_mean(out):
    # value is all ones: each output is sum_j weight_ij * keep_ij / (1 - p), 1 on average
    assert out.shape == (4, 2, 64, 1)
    assert abs(out.mean() - 1.0) < 0.05, out.mean()
    assert (np.abs(out - 1.0) > 1e-3).mean() > 0.5, "dropout left the weights alone"


case("scaled_dot_product_attention",
     lambda r: ((randf(r, 4, 2, 64, 8), randf(r, 4, 2, 64, 8), np.ones((4, 2, 64, 1), np.float32)),
                {"dropout_p": 0.5}),
     None, id="dropout", check=_dropout_keeps_the_mean)
