"""Derivative rules of normalisation (batch, layer, group, instance, RMS), dropout, embedding
and the gated linear unit (PyTorch's formulas).

The normalisations recompute their statistics from the saved input instead of
keeping them: one pass over the input against a second full-size saved tensor.
Dropout records through a forward of its own that keeps the mask it drew
(drawing exactly as the op does, so results match it).
"""
import math

import numpy as np

from fxkit.runtime.autograd.batch_norm_training_backward import batch_norm_training_backward
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.factories import generator
from fxkit.runtime.ops.norm_ops import rms_eps
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_cat = get_op("cat")
_index_add = get_op("index_add")
_ones = get_op("ones")
_zeros = get_op("zeros")


def _normalized_backward(g, centered, invstd, axes, count):
    """d/dx of ``(x - mean) * invstd`` over ``axes`` (count elements each), given ``g``
    already multiplied by the affine weight: ``invstd * (g - mean(g) - xhat * mean(g * xhat))``."""
    g_mean = g.sum(axes, True) / count
    proj = (g * centered).sum(axes, True) * (invstd * invstd / count)
    return (g - g_mean - centered * proj) * invstd


def _moments(x, axes, eps):
    """``(x - mean, 1 / sqrt(biased variance + eps))`` over ``axes``, keeping dims."""
    centered = x - x.mean(axes, True)
    return centered, ((centered * centered).mean(axes, True) + eps).rsqrt()


@defgrad("batch_norm", saves=("input", "running_mean", "running_var", "weight"),
         nondiff=("running_mean", "running_var"))
def _batch_norm(ctx, g, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                eps=1e-5):
    if training:
        grads = batch_norm_training_backward(g, input, weight, eps)
        return (grads[0] if ctx.needs(input) else None, None, None,
                grads[1] if weight is not None and ctx.needs(weight) else None,
                grads[2] if bias is not None and ctx.needs(bias) else None)
    axes = (0,) + tuple(range(2, input.ndim))
    stat_shape = (1, input.shape[1]) + (1,) * (input.ndim - 2)
    centered = input - running_mean.reshape(stat_shape)
    invstd = (running_var.reshape(stat_shape) + eps).rsqrt()
    gx = gw = None
    if ctx.needs(input):
        gx = (g if weight is None else g * weight.reshape(stat_shape)) * invstd
    if weight is not None and ctx.needs(weight):
        gw = ((g * centered).sum(axes, True) * invstd).reshape(input.shape[1])
    gb = g.sum(axes) if bias is not None and ctx.needs(bias) else None
    return gx, None, None, gw, gb


@defgrad("layer_norm", saves=("input", "weight"))
def _layer_norm(ctx, g, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    lead = tuple(range(input.ndim - k))
    centered, invstd = _moments(input, axes, eps)
    gx = gw = gb = None
    if ctx.needs(input):
        scaled = g if weight is None else g * weight
        gx = _normalized_backward(scaled, centered, invstd, axes, math.prod(input.shape[input.ndim - k:]))
    if weight is not None and ctx.needs(weight):
        gw = (g * centered * invstd).sum(lead) if lead else g * centered * invstd
    if bias is not None and ctx.needs(bias):
        gb = g.sum(lead) if lead else g
    return gx, None, gw, gb


@defgrad("group_norm", saves=("input", "weight"))
def _group_norm(ctx, g, input, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = input.shape[:2]
    grouped = (n, num_groups, c // num_groups * math.prod(input.shape[2:]))
    centered, invstd = _moments(input.reshape(grouped), (2,), eps)
    channel = (1, c) + (1,) * (input.ndim - 2)
    spatial = (0,) + tuple(range(2, input.ndim))
    gx = gw = gb = None
    if ctx.needs(input):
        scaled = g if weight is None else g * weight.reshape(channel)
        gx = _normalized_backward(scaled.reshape(grouped), centered, invstd, (2,), centered.shape[2])
        gx = gx.reshape(tuple(input.shape))
    if weight is not None and ctx.needs(weight):
        xhat = (centered * invstd).reshape(tuple(input.shape))
        gw = (g * xhat).sum(spatial)
    if bias is not None and ctx.needs(bias):
        gb = g.sum(spatial)
    return gx, None, gw, gb


def _dropout_forward(mask_shape):
    """A recording forward for a dropout op: the op's own draw, keeping the mask."""

    def forward(op, args, kwargs):
        call = dict(zip(("input", "p", "training", "inplace"), args), **kwargs)
        x, p, training = call["input"], call.get("p", 0.5), call.get("training", True)
        op.shape_rule(TensorMeta(x.shape, x.dtype, x.device), p, training)  # the op's own checks
        if not training or p == 0:
            return Tensor._make(x._data, x.device), None
        xp = x.device.xp
        if p == 1:
            return Tensor._make(xp.zeros_like(x._data), x.device), "all dropped"
        # NOTE: the same draw as nn_misc_ops._dropout, so a recorded call gives the op's values
        keep = generator(xp).random(mask_shape(x.shape), dtype=np.float32) >= p
        scale = 1.0 / (1.0 - p)
        out = xp.multiply(x._data, scale)
        out *= keep
        return Tensor._make(out, x.device), (Tensor._make(keep, x.device), scale)

    return forward


def _dropout_backward(ctx, g, input, p=0.5, training=True, inplace=False):
    if ctx.extra is None:  # not training, or p == 0: the identity
        return g
    if isinstance(ctx.extra, str):  # p == 1
        return g * 0.0
    keep, scale = ctx.extra
    return g * keep * scale


defgrad("dropout", forward=_dropout_forward(lambda shape: shape), inplace_kw=True)(_dropout_backward)
defgrad("dropout2d", forward=_dropout_forward(lambda shape: tuple(shape[:2]) + (1,) * (len(shape) - 2)),
        inplace_kw=True)(_dropout_backward)


@defgrad("embedding", saves=("input",), nondiff=("input",))
def _embedding(ctx, g, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
               sparse=False):
    num, dim = weight.shape
    index = input.reshape(-1)
    rows = g.reshape(-1, dim)
    if scale_grad_by_freq:
        counts = _index_add(_zeros(num, dtype=g.dtype, device=g.device), 0, index,
                            _ones(index.shape[0], dtype=g.dtype, device=g.device))
        rows = rows / counts[index].unsqueeze(1)
    grad = _index_add(_zeros(num, dim, dtype=g.dtype, device=g.device), 0, index, rows)
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return None, grad


@defgrad("instance_norm", saves=("input", "running_mean", "running_var", "weight"),
         nondiff=("running_mean", "running_var"))
def _instance_norm(ctx, g, input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                   momentum=0.1, eps=1e-5):
    c = input.shape[1]
    channel = (1, c) + (1,) * (input.ndim - 2)
    spatial = tuple(range(2, input.ndim))
    if use_input_stats:
        centered, invstd = _moments(input, spatial, eps)
    else:
        centered = input - running_mean.reshape(channel)
        invstd = (running_var.reshape(channel) + eps).rsqrt()
    gx = gw = gb = None
    if ctx.needs(input):
        scaled = g if weight is None else g * weight.reshape(channel)
        if use_input_stats:
            gx = _normalized_backward(scaled, centered, invstd, spatial, math.prod(input.shape[2:]))
        else:
            gx = scaled * invstd
    if weight is not None and ctx.needs(weight):
        gw = (g * centered * invstd).sum((0,) + spatial)
    if bias is not None and ctx.needs(bias):
        gb = g.sum((0,) + spatial)
    return gx, None, None, gw, gb


@defgrad("rms_norm", saves=("input", "weight"))
def _rms_norm(ctx, g, input, normalized_shape, weight=None, eps=None):
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    lead = tuple(range(input.ndim - k))
    inv_rms = ((input * input).mean(axes, True) + rms_eps(eps, input.dtype.np)).rsqrt()
    gx = gw = None
    if ctx.needs(input):
        scaled = g if weight is None else g * weight
        # d/dx of x * r, r = (mean(x^2) + eps)^-1/2: r * (g - x * r^2 * mean(g * x))
        gx = (scaled - input * (inv_rms * inv_rms) * (scaled * input).mean(axes, True)) * inv_rms
    if weight is not None and ctx.needs(weight):
        gw = (g * input * inv_rms).sum(lead) if lead else g * input * inv_rms
    return gx, None, gw


@defgrad("glu", saves=("input",))
def _glu(ctx, g, input, dim=-1):  # noqa: A002
    first, second = input.chunk(2, dim)
    gate = second.sigmoid()
    return _cat([g * gate, g * first * gate * (1.0 - gate)], dim)
