"""Layer-level error messages: what went wrong, with the actual shapes, and how to fix it."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import ShapeError


def test_conv2d_refuses_3d_input_with_unsqueeze_hint():
    conv = nn.Conv2d(3, 8, 3)
    with pytest.raises(ShapeError) as err:
        conv(fxkit.randn(3, 32, 32))
    message = str(err.value)
    assert "Conv2d: expected a 4-D input (N, C, H, W), got a 3-D input of shape [3, 32, 32]" in message
    assert "hint: add a batch dimension with x.unsqueeze(0)" in message
    assert isinstance(err.value, ValueError)
    with pytest.raises(ShapeError, match=r"got a 2-D input of shape \[32, 32\]"):
        conv(fxkit.randn(32, 32))


def test_conv2d_channel_mismatch_names_in_channels():
    with pytest.raises(ShapeError) as err:
        nn.Conv2d(3, 8, 3)(fxkit.randn(1, 4, 16, 16))
    assert "expects in_channels=3, got an input of shape [1, 4, 16, 16] with 4 channels" in str(err.value)


def test_linear_in_features_mismatch_names_layer_and_input():
    with pytest.raises(ShapeError) as err:
        nn.Linear(500, 10)(fxkit.randn(64, 320))
    message = str(err.value)
    assert "64x320 and 500x10" in message  # the op's matmul-style message
    assert ("hint: Linear(in_features=500, out_features=10) got an input of shape [64, 320]; "
            "its last dimension must be in_features=500") in message


def test_batchnorm_rank_errors():
    with pytest.raises(ShapeError, match=r"BatchNorm2d: expected a 4-D \(N, C, H, W\) input, got a 3-D input "
                                         r"of shape \[2, 3, 4\]"):
        nn.BatchNorm2d(3)(fxkit.randn(2, 3, 4))
    with pytest.raises(ShapeError, match=r"BatchNorm1d: expected a 2-D \(N, C\) or 3-D \(N, C, L\) input"):
        nn.BatchNorm1d(3)(fxkit.randn(2, 3, 4, 4))


@pytest.mark.parametrize("make, match", [
    (lambda: nn.Conv2d(4, 6, 3, groups=4), r"out_channels \(6\) must be divisible by groups \(4\)"),
    (lambda: nn.Conv2d(3, 6, 3, groups=2), r"in_channels \(3\) must be divisible by groups \(2\)"),
    (lambda: nn.Conv2d(3, 6, 3, stride=2, padding="same"), "padding='same' is not supported for strided"),
    (lambda: nn.Conv2d(3, 6, 3, padding="full"), "invalid padding string 'full'"),
    (lambda: nn.Conv2d(3, 6, 3, padding_mode="reflect"), "padding_mode 'reflect' is not supported"),
    (lambda: nn.MultiheadAttention(10, 3), r"embed_dim \(10\) must be divisible by num_heads \(3\)"),
    (lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True), "add_bias_kv and add_zero_attn are not supported"),
    (lambda: nn.Dropout(1.5), "between 0 and 1, but got 1.5"),
    (lambda: nn.GELU("fast"), "approximate must be 'none' or 'tanh'"),
    (lambda: nn.Embedding(5, 2, padding_idx=5), "padding_idx=5 must be within num_embeddings=5"),
])
def test_constructor_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_multihead_attention_shape_errors():
    mha = nn.MultiheadAttention(8, 2)
    x = fxkit.randn(5, 2, 8)
    with pytest.raises(ShapeError, match=r"expected query with embedding dimension 8, got query of shape \[5, 2, 6\]"):
        mha(fxkit.randn(5, 2, 6), x, x)
    with pytest.raises(ShapeError, match=r"attn_mask of shape \[5, 4\] should be \[5, 5\] \(L, S\)"):
        mha(x, x, x, attn_mask=fxkit.from_numpy(np.zeros((5, 4), dtype=bool)))
    with pytest.raises(ShapeError, match=r"key_padding_mask of shape \[5, 2\] should be \[2, 5\] \(N, S\)"):
        mha(x, x, x, key_padding_mask=fxkit.from_numpy(np.zeros((5, 2), dtype=bool)))
