"""Hand-written PyTorch modules for the torch.export route of `fxkit.from_torch`, and the comparison.

Each module exercises idioms real models use: buffers and tensor constants,
in-place updates, views, shape arithmetic on a dynamic batch, attention with
causal and padding masks, ``torch._assert``. `compare` runs the torch module
and the imported graph on the same random inputs and returns the largest
relative error over the outputs (the acceptance metric of
`tests.interop.zoo_onnx.relative_error`).
"""
import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn as tnn

import fxkit
from tests.interop.zoo_onnx import as_tuple, relative_error


class Buffers(tnn.Module):
    """Parameters, persistent and non-persistent buffers, a tensor attribute and a constant made in forward."""

    def __init__(self):
        super().__init__()
        self.blocks = tnn.ModuleList([tnn.Linear(6, 6), tnn.Linear(6, 6)])
        self.register_buffer("scale", torch.rand(6) + 0.5)
        self.register_buffer("offset", torch.randn(6), persistent=False)
        self.table = torch.linspace(-1.0, 1.0, 6)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x)) * self.scale + self.offset
        return x * self.table + torch.tensor([0.5, -0.25, 1.0, 2.0, 0.0, -1.0])


class InPlace(tnn.Module):
    """In-place activations, arithmetic, slice assignment and masked fills."""

    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(5, 5)

    def forward(self, x):
        y = self.fc(x).relu_()
        y.mul_(2.0).add_(1.0)
        y[:, 0] = 0.0
        y[:, 2:4] += x[:, :2]
        y.masked_fill_(x > 1.0, -3.0)
        return y


class Views(tnn.Module):
    """Views and indexing: reshape from the dynamic batch, permute, chunk, split, select, slices, expand."""

    def forward(self, x):
        b = x.shape[0]
        y = x.view(b, 4, -1).transpose(1, 2).contiguous()
        first, second = y.chunk(2, dim=-1)
        parts = torch.split(y, [1, 3], dim=2)
        z = torch.cat([first * second.flip(-1), parts[0].expand(-1, -1, 2)], dim=-1)
        row = z[:, 1] + z[:, -1, None].squeeze(1)
        return z.flatten(1)[:, ::2], row.unsqueeze(0).permute(1, 0, 2).reshape(b * 2, -1), y.new_zeros(b, 3) + 1


class Attention(tnn.Module):
    """A transformer block: causal mask buffer sliced to the length, padding mask, shape checks."""

    def __init__(self, dim=16, heads=4, max_len=32):
        super().__init__()
        self.heads = heads
        self.qkv = tnn.Linear(dim, 3 * dim)
        self.proj = tnn.Linear(dim, dim)
        self.norm1, self.norm2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
        self.mlp = tnn.Sequential(tnn.Linear(dim, 2 * dim), tnn.GELU(), tnn.Linear(2 * dim, dim))
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x, padding_mask):
        batch, length, dim = x.shape
        torch._assert(dim == self.qkv.in_features, "wrong feature size")
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        mask = self.causal[:length, :length] & padding_mask[:, None, None, :].bool()
        scores = q @ k.transpose(-2, -1) / (dim // self.heads) ** 0.5
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        fused = TF.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = (attn @ v + fused).transpose(1, 2).reshape(batch, length, dim)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


class ConvNet(tnn.Module):
    """A small convnet with BatchNorm (running statistics), pooling and a reshape by the batch."""

    def __init__(self):
        super().__init__()
        self.features = tnn.Sequential(tnn.Conv2d(3, 8, 3, padding=1), tnn.BatchNorm2d(8), tnn.ReLU(inplace=True),
                                       tnn.MaxPool2d(2), tnn.Conv2d(8, 8, 3, stride=2, groups=2),
                                       tnn.BatchNorm2d(8), tnn.Hardtanh(0.0, 6.0))
        self.head = tnn.Linear(8, 4)

    def forward(self, x):
        y = TF.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(y.view(y.size(0), -1)).log_softmax(dim=1)


class VisionOps(tnn.Module):
    """The ATen ops vision models bring in that torch would otherwise decompose: pixel_shuffle and
    pixel_unshuffle (sub-pixel convolutions), var_mean and batch_norm without running statistics
    (timm's weight standardisation), 1-D pools, glu, and isinf/isfinite (masking non-finite values);
    and the dtype of an item of a multi-output op (``unbind(...)[0]``) read by ``type_as``."""

    def forward(self, x):
        n = x.shape[0]
        image = x.reshape(n, 8, 2, 3)
        spread, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
        normalized = (x - mean) / (spread + 1e-5).sqrt()
        deviation, _ = torch.std_mean(x, dim=(1,))
        ratio = x / (x > -0.5).float()  # +-inf where x <= -0.5
        cleaned = torch.where(torch.isfinite(ratio), ratio, torch.zeros_like(ratio)) + torch.isinf(ratio).float()
        rows = x.reshape(n, 4, 12)
        # timm's weight standardisation: batch statistics with no running ones, in an eval-mode model
        standardized = tnn.functional.batch_norm(rows, None, None, training=True, momentum=0.0, eps=1e-5)
        first, second = x.reshape(n, 2, 24).unbind(1)
        typed = torch.cat([first[:, :4], second[:, 4:]], 1).type_as(second)  # eva's rope: dtype of an item
        windows = rows.unfold(2, 4, 3).unfold(1, 2, 2)  # halo attention's blocks
        return (standardized, typed, windows, tnn.functional.pixel_shuffle(image, 2), tnn.functional.pixel_unshuffle(image.reshape(n, 2, 4, 6), 2),
                normalized, deviation, cleaned, tnn.functional.glu(rows, dim=1),
                tnn.functional.max_pool1d(rows, 3, 2, 1), tnn.functional.avg_pool1d(rows, 2),
                tnn.functional.max_pool1d(rows, 2, return_indices=True)[1])


def randomize_batch_norm(module, seed=0):
    """Non-trivial running statistics, so BatchNorm is really tested."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, tnn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5, generator=generator)
                m.running_var.uniform_(0.5, 1.5, generator=generator)
    return module


def compare(torch_module, fx_module, inputs):
    """The largest relative error of ``fx_module`` against ``torch_module`` on ``inputs`` (torch tensors)."""
    with torch.no_grad():
        expected = as_tuple(torch_module(*inputs))
    actual = as_tuple(fx_module(*(fxkit.from_numpy(t.numpy().copy()) for t in inputs)))
    assert len(actual) == len(expected)
    return max(relative_error(a, e.numpy()) for a, e in zip(actual, expected))


def random(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


class Regions(tnn.Module):
    """``torch.no_grad()`` and disabled-autocast regions, which torch.export records as higher-order ops."""

    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            y = self.fc(x) * 2
        with torch.autocast("cpu", enabled=False):
            z = y.float() + 1
        return z + x
