"""`MultiheadAttention`, with PyTorch's parameter layout and forward semantics.

Parameters match ``torch.nn.MultiheadAttention`` (``in_proj_weight`` of shape
``(3E, E)`` packing the q, k and v projections, ``in_proj_bias``, and
``out_proj``; separate ``q/k/v_proj_weight`` when kdim/vdim differ), so its
state_dict loads unchanged. The heads are computed as one batched matmul over
``(N, heads, L, head_dim)``; the scores are the same dot products PyTorch's
``bmm`` formulation computes. Without ``need_weights`` the heads go through the
``scaled_dot_product_attention`` op, one graph node, as PyTorch's fast path does.
"""
import math

from fxkit.errors import ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.linear import NonDynamicallyQuantizableLinear
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty
from fxkit.runtime.registry import get_op

_full_like = get_op("full_like")
_where = get_op("where")


class MultiheadAttention(Module):
    """Multi-head scaled dot-product attention (Vaswani et al.).

    Args:
        embed_dim: model dimension E (query size).
        num_heads: number of heads; must divide ``embed_dim``.
        dropout: dropout probability on the attention weights (training only).
        bias: learn the in- and out-projection biases.
        add_bias_kv, add_zero_attn: accepted for signature parity; only False
            is supported.
        kdim, vdim: key and value sizes (default ``embed_dim``).
        batch_first: inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.

    Example:
        >>> attn = nn.MultiheadAttention(64, 8, batch_first=True)
        >>> x = fxkit.randn(2, 10, 64)
        >>> out, weights = attn(x, x, x)
        >>> out.shape, weights.shape
        ((2, 10, 64), (2, 10, 10))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ValueError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported by fxkit; "
                             "leave them False")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn

        def param(*shape):
            return Parameter(empty(*shape, device=device, dtype=dtype))

        if self._qkv_same_embed_dim:
            self.in_proj_weight = param(3 * embed_dim, embed_dim)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = param(embed_dim, embed_dim)
            self.k_proj_weight = param(embed_dim, self.kdim)
            self.v_proj_weight = param(embed_dim, self.vdim)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = param(3 * embed_dim)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: ``(L, N, E)`` (``(N, L, E)`` if batch_first) or unbatched ``(L, E)``.
            key, value: ``(S, N, kdim/vdim)`` likewise.
            key_padding_mask: ``(N, S)``; True (or -inf) marks keys to ignore.
            need_weights: also return the attention weights.
            attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; True (bool) masks a
                position out, a float mask is added to the scores.
            average_attn_weights: average the returned weights over heads.

        Returns:
            ``(output, weights)``: output like ``query``; weights ``(N, L, S)``
            (``(N, num_heads, L, S)`` unaveraged) or None without need_weights.
        """
        self_attention = query is key and key is value
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        batch_first = self.batch_first or not batched
        if batch_first:
            bsz, tgt_len, embed_dim = query.shape
            src_len = key.shape[1]
        else:
            tgt_len, bsz, embed_dim = query.shape
            src_len = key.shape[0]
        if embed_dim != self.embed_dim:
            raise ShapeError(f"MultiheadAttention: expected query with embedding dimension {self.embed_dim}, got "
                             f"query of shape {list(query.shape)}")
        q, k, v = self._in_projection(query, key, value, self_attention)
        q = self._split_heads(q, tgt_len, bsz, batch_first)
        k = self._split_heads(k, src_len, bsz, batch_first)
        v = self._split_heads(v, src_len, bsz, batch_first)
        mask = self._merged_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len, q.dtype)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            # NOTE: the weights are a result here, so the scores are computed in the open (as PyTorch does)
            scores = (q * math.sqrt(1.0 / float(self.head_dim))).matmul(k.transpose(-2, -1))  # (N, H, L, S)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, -1)
            if dropout > 0.0:
                weights = F.dropout(weights, dropout)
            out = weights.matmul(v)  # (N, H, L, D)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        if batch_first:
            out = out.permute(0, 2, 1, 3).reshape(bsz, tgt_len, embed_dim)
        else:
            out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        if not batched:
            out = out.squeeze(0)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            weights = weights.squeeze(0)
        return out, weights

    def _in_projection(self, query, key, value, self_attention):
        bias = self.in_proj_bias
        b_q, b_k, b_v = bias.chunk(3) if bias is not None else (None, None, None)
        if not self._qkv_same_embed_dim:
            return (F.linear(query, self.q_proj_weight, b_q), F.linear(key, self.k_proj_weight, b_k),
                    F.linear(value, self.v_proj_weight, b_v))
        if self_attention:
            return F.linear(query, self.in_proj_weight, bias).chunk(3, -1)
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def _split_heads(self, x, length, bsz, batch_first):
        """``(N, L, E)`` or ``(L, N, E)`` -> ``(N, heads, L, head_dim)``."""
        if batch_first:
            return x.reshape(bsz, length, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        return x.reshape(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _merged_mask(self, attn_mask, key_padding_mask, bsz, tgt_len, src_len, dtype):
        """The additive mask, broadcastable to the ``(N, H, L, S)`` scores, or None."""
        mask = None
        if attn_mask is not None:
            shape = tuple(attn_mask.shape)
            if shape == (tgt_len, src_len):
                mask = _additive(attn_mask, dtype)
            elif shape == (bsz * self.num_heads, tgt_len, src_len):
                mask = _additive(attn_mask, dtype).reshape(bsz, self.num_heads, tgt_len, src_len)
            else:
                raise ShapeError(f"MultiheadAttention: attn_mask of shape {list(shape)} should be "
                                 f"[{tgt_len}, {src_len}] (L, S) or [{bsz * self.num_heads}, {tgt_len}, {src_len}] "
                                 f"(N * num_heads, L, S)")
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise ShapeError(f"MultiheadAttention: key_padding_mask of shape {list(key_padding_mask.shape)} "
                                 f"should be [{bsz}, {src_len}] (N, S)")
            padding = _additive(key_padding_mask, dtype).reshape(bsz, 1, 1, src_len)
            mask = padding if mask is None else mask + padding
        return mask

    def _init_kwargs(self):
        return {"embed_dim": self.embed_dim, "num_heads": self.num_heads, "dropout": self.dropout,
                "bias": self.in_proj_bias is not None, "kdim": self.kdim, "vdim": self.vdim,
                "batch_first": self.batch_first}


def _additive(mask, dtype):
    """A boolean mask (True = masked out) as 0 / -inf of ``dtype``; a float mask as is."""
    if mask.dtype is _dt.bool_:
        return _where(mask, _full_like(mask, float("-inf"), dtype=dtype), 0.0)
    return mask if mask.dtype is dtype else mask.to(dtype)
