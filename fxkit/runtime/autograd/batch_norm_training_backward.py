"""``batch_norm_training_backward``: the three gradients of a training-mode ``batch_norm`` in
one op (what PyTorch's ``native_batch_norm_backward`` computes in training), for its
derivative rule.

Written with Tensor ops, the rule reads and writes the full-size activation about twenty
times (centring, the variance, two products with the centred input, the combination of
four terms, each a temporary) and costs a ResNet more than its elementwise forward. Here
the statistics are recomputed from the saved input (a per-channel mean, then one sum of
squares of the centred input), the per-channel sums come from ``einsum`` without
temporaries, and the input gradient, an affine map of the output gradient and the centred
input per channel, is written over the centred input: about ten passes and one
temporary. Large contiguous float inputs take one numba call for all of it
(`fxkit.runtime.ops.channel_loops.batch_norm_gradient_into`): three passes, the
sums in float64.
"""
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.ops.nn_checks import dims_differ, dtype_of, require_float, shapes_differ, shown
from fxkit.runtime.ops.norm_ops import channel_moments

_NAME = "batch_norm_training_backward"


def _check(grad_output, input, weight):  # noqa: A002
    require_float(_NAME, input)
    require_float(_NAME, grad_output, "grad_output")
    if len(input.shape) < 2:
        raise ShapeError(f"{_NAME}: expected an input of rank 2 or more (N, C, *), got shape {shown(input.shape)}")
    if shapes_differ(grad_output.shape, input.shape):
        raise ShapeError(f"{_NAME}: grad_output of shape {shown(grad_output.shape)} does not match the input's "
                         f"shape {shown(input.shape)}; it is the gradient of batch_norm's output")
    if dtype_of(grad_output) is not dtype_of(input):
        raise DTypeError(f"{_NAME}: grad_output ({dtype_of(grad_output).name}) and input ({dtype_of(input).name}) "
                         f"must have the same dtype")
    if weight is not None:
        require_float(_NAME, weight, "weight")
        if len(weight.shape) != 1 or dims_differ(weight.shape[0], input.shape[1]):
            raise ShapeError(f"{_NAME}: weight should have shape [{input.shape[1]}] (one value per channel of "
                             f"the input), got {shown(weight.shape)}")
        if dtype_of(weight) is not dtype_of(input):
            raise DTypeError(f"{_NAME}: weight ({dtype_of(weight).name}) and input ({dtype_of(input).name}) must "
                             f"have the same dtype")


def _rule(grad_output, input, weight=None, eps=1e-5):  # noqa: A002
    _check(grad_output, input, weight)
    per_channel = TensorMeta((input.shape[1],), input.dtype, input.device)
    return TensorMeta(tuple(input.shape), input.dtype, input.device), per_channel, per_channel


@op(_NAME, kind="other", shape_rule=_rule, method=False)
def batch_norm_training_backward(xp, grad_output, input, weight=None, eps=1e-5):  # noqa: A002
    """The gradients ``(grad_input, grad_weight, grad_bias)`` of ``batch_norm(input, ...,
    weight, bias, training=True, eps=eps)`` given its output's gradient: the batch's
    statistics normalise, as in the forward. ``grad_weight`` is the sum of
    ``grad_output * normalised input`` per channel, ``grad_bias`` that of ``grad_output``
    (both computed even without a weight or bias); half types compute in float32.

    Example:
        >>> gx, gw, gb = fxkit.ops.batch_norm_training_backward(g, x, weight)  # x, g: (N, C, H, W)
    """
    _check(grad_output, input, weight)
    dtype = input.dtype
    if dtype.itemsize < 4:  # float16, bfloat16: computed in float32, rounded once
        wide = batch_norm_training_backward.impl(
            xp, grad_output.astype(np.float32), input.astype(np.float32),
            None if weight is None else weight.astype(np.float32), eps)
        return tuple(r.astype(dtype) for r in wide)
    n, c = input.shape[:2]
    x = input.reshape(n, c, math.prod(input.shape[2:]))
    g = grad_output.reshape(x.shape)
    count = x.size // c
    loops = (loops_fit(xp, x, g) and x.flags.c_contiguous and g.flags.c_contiguous
             and (weight is None or weight.dtype == dtype))
    if loops:
        # everything in one numba call: the statistics and both sums in float64 (as PyTorch's CPU kernel), the
        # coefficients, the input gradient; 3x faster than numpy's on ResNet-18's 8x64x16x16 activations
        from fxkit.runtime.ops.channel_loops import batch_norm_gradient_into  # NOTE: numba loads here first

        out, grad_weight, grad_bias = xp.empty_like(x), xp.empty(c, dtype), xp.empty(c, dtype)
        batch_norm_gradient_into(x, g, xp.ones(c, dtype) if weight is None else weight, eps, out, grad_weight,
                                 grad_bias)
        return out.reshape(input.shape), grad_weight, grad_bias
    _, centered, var = channel_moments(xp, x)
    grad_bias = g.sum(axis=0).sum(axis=-1)
    sum_g_centered = xp.einsum("ncp,ncp->c", g, centered)
    invstd = 1.0 / xp.sqrt(var + eps)
    grad_weight = sum_g_centered * invstd
    scale = invstd if weight is None else invstd * weight
    # scale * (g - mean(g) - xhat * mean(g * xhat)), xhat = centered * invstd, is per channel
    # scale * g + a * centered + b: written over ``centered``, one temporary (scale * g).
    a, b = -(scale * invstd) * (grad_weight / count), -scale * (grad_bias / count)
    centered *= a[:, None]
    centered += b[:, None]
    centered += g * scale[:, None]
    return centered.reshape(input.shape), grad_weight, grad_bias
