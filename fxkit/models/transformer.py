"""A pre-norm Transformer encoder block (as in GPT-2 / ViT)."""
from fxkit import nn


class TransformerBlock(nn.Module):
    """``x + attn(ln1(x))`` then ``x + mlp(ln2(x))`` over ``(N, L, embed_dim)`` inputs.

    Args:
        embed_dim: model dimension.
        num_heads: attention heads (must divide ``embed_dim``).
        mlp_ratio: hidden size of the MLP as a multiple of ``embed_dim``.
        dropout: dropout on the attention weights (training only).

    Example:
        >>> TransformerBlock(128, 4)(fxkit.randn(8, 32, 128)).shape
        (8, 32, 128)
    """

    def __init__(self, embed_dim=128, num_heads=4, mlp_ratio=4, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, mlp_ratio * embed_dim),
            nn.GELU(),
            nn.Linear(mlp_ratio * embed_dim, embed_dim),
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.ln2(x))
        return x
