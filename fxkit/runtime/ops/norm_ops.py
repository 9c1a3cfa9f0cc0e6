"""Normalisation ops: ``batch_norm``, ``layer_norm``, ``group_norm``, ``instance_norm``, ``rms_norm``.

Signatures, defaults and formulas follow ``torch.nn.functional``. They are
kind ``other``, not ``reduction``: the output has the input's shape (the
statistics they reduce are internal), so passes that reason about reduced
shapes must not treat them as reductions.

batch_norm, group_norm and instance_norm apply one affine map ``x * scale + shift`` whose
``scale`` and ``shift`` are computed on the small per-channel (per sample and
channel) vectors first, so the full-size data is touched by one multiply and
one in-place add. layer_norm's affine varies along the normalised dims, so it
scales the centred rows in place instead. Half-precision inputs (float16,
bfloat16) get their statistics in float32; bfloat16 is also normalised in
float32 and rounded once, as in PyTorch.
"""
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import dims_differ, require_float, shapes_differ, shown, stat_dtype


def _check_channel_vector(name, vec, what, channels):
    if vec is None:
        return
    if len(vec.shape) != 1 or dims_differ(vec.shape[0], channels):
        raise ShapeError(f"{name}: {what} should have shape [{channels}] (one value per channel of the "
                         f"input), got {shown(vec.shape)}")
    require_float(name, vec, what)


def _check_batch_norm(input, running_mean, running_var, weight, bias, training):
    if len(input.shape) < 2:
        raise ShapeError(f"batch_norm: expected an input of rank 2 (N, C), 3 (N, C, L), 4 (N, C, H, W) or "
                         f"5 (N, C, D, H, W), got rank {len(input.shape)} with shape {shown(input.shape)}")
    require_float("batch_norm", input)
    channels = input.shape[1]
    if not training and (running_mean is None or running_var is None):
        raise ShapeError("batch_norm: running_mean and running_var must be given in evaluation mode "
                         "(training=False); pass the running statistics or training=True")
    if (running_mean is None) != (running_var is None):
        raise ShapeError("batch_norm: running_mean and running_var must either both be None or neither be None")
    for vec, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                      (weight, "weight"), (bias, "bias")):
        _check_channel_vector("batch_norm", vec, what, channels)
    if training and all(isinstance(d, int) for d in input.shape):
        per_channel = math.prod(d for i, d in enumerate(input.shape) if i != 1)
        if per_channel <= 1:
            raise ShapeError(f"batch_norm: expected more than 1 value per channel when training, got input "
                             f"of shape {shown(input.shape)}; use a larger batch or training=False")


def _batch_norm_rule(input, running_mean, running_var, weight=None, bias=None, training=False,
                     momentum=0.1, eps=1e-5):
    _check_batch_norm(input, running_mean, running_var, weight, bias, training)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("batch_norm", kind="other", method=False, pure=False, shape_rule=_batch_norm_rule)
def batch_norm(xp, input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation over the channel dimension 1 of ``(N, C, *)`` inputs.

    In training mode the batch's statistics normalise the input and the
    running statistics are updated in place, ``running = (1 - momentum) *
    running + momentum * batch_stat``, with the unbiased variance like
    PyTorch. In evaluation mode the running statistics normalise it.

    The op is registered impure (``pure=False``) because a training-mode
    call writes its running statistics: dead-code elimination or CSE must
    never drop or merge one. This also keeps evaluation-mode calls, which is
    only conservative (an unused eval batch_norm is rare; fold_conv_bn removes
    the common ones).

    Example:
        >>> y = fxkit.ops.batch_norm(x, mean, var, weight, bias)  # x: (N, C, H, W)
    """
    _check_batch_norm(input, running_mean, running_var, weight, bias, training)
    x = input
    if training:
        mean, var = _batch_statistics(xp, x, stat_dtype(x))
        update_running_statistics(running_mean, running_var, mean, var, momentum, x.size // x.shape[1])
    else:
        mean, var = running_mean, running_var
    # scale = weight / sqrt(var + eps), shift = bias - mean * scale, both (C,)
    scale = var + eps
    xp.sqrt(scale, out=scale)
    xp.reciprocal(scale, out=scale)
    if weight is not None:
        scale *= weight
    shift = mean * scale
    xp.negative(shift, out=shift)
    if bias is not None:
        shift += bias
    return _channel_affine(xp, x, scale, shift, (x.shape[1],) + (1,) * (x.ndim - 2))


def update_running_statistics(running_mean, running_var, mean, var, momentum, count):
    """``running = (1 - momentum) * running + momentum * batch``, in place, with the batch's unbiased
    variance (``var`` is the biased one of ``count`` values per channel), as PyTorch; either may be None."""
    if running_mean is not None:
        running_mean *= 1 - momentum
        running_mean += mean * momentum
    if running_var is not None:
        running_var *= 1 - momentum
        running_var += var * (momentum * count / (count - 1))


def _batch_statistics(xp, x, acc):
    """The per-channel mean and biased variance of ``x`` (N, C, *), accumulated in ``acc``.

    numpy's ``mean``/``var`` over axes 0, 2, 3 walk the small trailing axes one by one and the
    variance makes two more temporaries; here the batch is summed first, and the variance is one
    ``einsum`` over the centred input (the same two-pass formula, so no cancellation). A large
    float32/float64 one runs as one numba pass accumulating in float64 about each channel's first
    value (`fxkit.runtime.ops.channel_loops.planes_moments`, as PyTorch's CPU kernel accumulates in
    double): 5x faster on ResNet-18's 8x64x32x32 activations and closer to the float64 statistics. A
    channels-last input (the numba backend's conv results) is read as its ``(pixels, C)`` rows;
    any other strided input keeps numpy's reductions rather than being copied."""
    c = x.shape[1]
    if x.flags.c_contiguous:
        rows = x.reshape(x.shape[0], c, math.prod(x.shape[2:]))
        if loops_fit(xp, rows) and x.dtype == acc:
            from fxkit.runtime.ops.channel_loops import planes_moments  # NOTE: numba loads at the first large one

            mean, var, unused = np.empty(c), np.empty(c), np.empty(c)
            planes_moments(rows, mean, var, rows, unused, unused, False)
            return mean.astype(acc), var.astype(acc)
        mean, _, var = channel_moments(xp, rows.astype(acc, copy=False))
        return mean, var
    last = x.transpose((0,) + tuple(range(2, x.ndim)) + (1,))
    if last.flags.c_contiguous:
        rows = last.reshape(-1, c).astype(acc, copy=False)
        mean = rows.sum(axis=0) / rows.shape[0]
        centered = rows - mean
        return mean, xp.einsum("mc,mc->c", centered, centered) / rows.shape[0]
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=axes, dtype=acc), x.var(axis=axes, dtype=acc)


def channel_moments(xp, rows):
    """``(mean, rows - mean, biased variance)`` per channel of ``rows`` (N, C, pixels), C-contiguous:
    the batch summed first (numpy's reduction over axes 0 and 2 walks the small trailing axis one by
    one), the variance one ``einsum`` over the centred rows (two passes, so no cancellation).
    Training ``batch_norm`` and its gradient op both normalise with these."""
    count = rows.shape[0] * rows.shape[2]
    mean = rows.sum(axis=0).sum(axis=-1) / count
    centered = rows - mean[:, None]
    return mean, centered, xp.einsum("ncp,ncp->c", centered, centered) / count


def _channel_affine(xp, x, scale, shift, shape):
    """``x * scale + shift`` with ``scale`` and ``shift`` reshaped to ``shape`` (per channel,
    or per sample and channel), one multiply and one in-place add over the data.

    Half types are computed in float32 and rounded once, as PyTorch does: ``x * scale`` and
    ``shift`` nearly cancel where the mean is large against the spread, and rounding scale,
    shift and the product to float16 each put errors of up to 3.6 float16 ulps into an
    instance norm of 8 values.
    """
    if x.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(_channel_affine, xp, x, scale, shift, shape)
    if x.dtype == xp.float16:
        return _channel_affine(xp, x.astype(xp.float32), scale, shift, shape).astype(xp.float16)
    scale, shift = scale.astype(x.dtype, copy=False), shift.astype(x.dtype, copy=False)
    if len(shape) == x.ndim - 1 > 1 and x.flags.c_contiguous and loops_fit(xp, x):  # per channel: (C, 1, ...)
        from fxkit.runtime.ops.channel_loops import channel_affine  # NOTE: numba loads at the first large one

        out = xp.empty_like(x)
        rows = (x.shape[0], x.shape[1], -1)
        channel_affine(x.reshape(rows), scale, shift, out.reshape(rows))
        return out
    out = xp.multiply(x, scale.reshape(shape))
    out += shift.reshape(shape)
    return out


def _row_statistics(xp, rows, eps):
    """For ``rows`` of shape (R, M): the rows minus their means, the means (R,) and
    ``1 / sqrt(biased variance + eps)`` (R,). Half types are computed in float32.

    The sums of squares are batched dot products (``(R, 1, M) @ (R, M, 1)``):
    BLAS-backed, with no squared temporary, and accurate over long rows.
    """
    mean = rows.mean(axis=1, keepdims=True, dtype=stat_dtype(rows))
    centered = rows - mean
    inv_std = xp.matmul(centered[:, None, :], centered[:, :, None]).reshape(rows.shape[0])
    inv_std /= rows.shape[1]
    inv_std += eps
    xp.sqrt(inv_std, out=inv_std)
    xp.reciprocal(inv_std, out=inv_std)
    return centered, mean.reshape(rows.shape[0]), inv_std


def _normalized_shape(normalized_shape):
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _check_layer_norm(input, normalized_shape, weight, bias):
    norm = _normalized_shape(normalized_shape)
    k = len(norm)
    if k == 0 or len(input.shape) < k or shapes_differ(input.shape[len(input.shape) - k:], norm):
        raise ShapeError(f"layer_norm: given normalized_shape={shown(norm)}, expected an input of shape "
                         f"[*, {shown(norm)[1:-1]}], but got input of shape {shown(input.shape)}")
    require_float("layer_norm", input)
    for vec, what in ((weight, "weight"), (bias, "bias")):
        if vec is not None and shapes_differ(vec.shape, norm):
            raise ShapeError(f"layer_norm: expected {what} of the same shape as normalized_shape="
                             f"{shown(norm)}, got {what} of shape {shown(vec.shape)}")
        if vec is not None:
            require_float("layer_norm", vec, what)
    return norm


def _layer_norm_rule(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    _check_layer_norm(input, normalized_shape, weight, bias)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("layer_norm", kind="other", method=False, shape_rule=_layer_norm_rule)
def layer_norm(xp, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` dimensions, then apply the
    elementwise affine ``weight`` and ``bias`` (of shape ``normalized_shape``).

    The variance is the biased one, like PyTorch; half-precision inputs are
    normalised in float32 and cast back.

    Example:
        >>> y = fxkit.ops.layer_norm(x, (768,), weight, bias)
    """
    norm = _check_layer_norm(input, normalized_shape, weight, bias)
    lead = input.shape[:input.ndim - len(norm)]
    size = math.prod(norm)
    out, _, inv_std = _row_statistics(xp, input.reshape(math.prod(lead), size), eps)
    out *= inv_std[:, None]
    if weight is not None:
        out *= weight.reshape(size)
    if bias is not None:
        out += bias.reshape(size)
    return out.reshape(input.shape).astype(input.dtype, copy=False)


def _check_group_norm(input, num_groups, weight, bias):
    if len(input.shape) < 2:
        raise ShapeError(f"group_norm: expected an input of rank >= 2 (N, C, *), got shape {shown(input.shape)}")
    if not isinstance(num_groups, int) or num_groups <= 0:
        raise DTypeError(f"group_norm: num_groups must be a positive int, got {num_groups!r}")
    require_float("group_norm", input)
    channels = input.shape[1]
    if isinstance(channels, int) and channels % num_groups:
        raise ShapeError(f"group_norm: expected the number of channels to be divisible by num_groups, but got "
                         f"input of shape {shown(input.shape)} ({channels} channels) and num_groups={num_groups}")
    for vec, what in ((weight, "weight"), (bias, "bias")):
        _check_channel_vector("group_norm", vec, what, channels)


def _group_norm_rule(input, num_groups, weight=None, bias=None, eps=1e-5):
    _check_group_norm(input, num_groups, weight, bias)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("group_norm", kind="other", method=False, shape_rule=_group_norm_rule)
def group_norm(xp, input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each of ``num_groups`` groups of channels of ``(N, C, *)`` inputs
    over the group's channels and spatial positions, then apply the per-channel
    affine ``weight`` and ``bias`` of shape ``(C,)``.

    Example:
        >>> y = fxkit.ops.group_norm(x, 8, weight, bias)  # x: (N, 32, H, W)
    """
    _check_group_norm(input, num_groups, weight, bias)
    n, c = input.shape[:2]
    per_group = c // num_groups
    rows = input.reshape(n * num_groups, per_group * math.prod(input.shape[2:]))
    _, mean, scale = _row_statistics(xp, rows, eps)
    # per-(sample, channel) affine map: (N, G) statistics repeated over each group's channels
    mean, scale = mean.reshape(n, num_groups), scale.reshape(n, num_groups)
    scale = xp.repeat(scale, per_group, axis=1)
    if weight is not None:
        scale *= weight
    shift = xp.repeat(mean, per_group, axis=1)
    shift *= scale
    xp.negative(shift, out=shift)
    if bias is not None:
        shift += bias
    return _channel_affine(xp, input, scale, shift, (n, c) + (1,) * (input.ndim - 2))


def _check_instance_norm(input, running_mean, running_var, weight, bias, use_input_stats):
    if len(input.shape) < 3:
        raise ShapeError(f"instance_norm: expected an input of rank >= 3 (N, C, *), got shape {shown(input.shape)}; "
                         f"add the batch dimension with unsqueeze(0)")
    require_float("instance_norm", input)
    channels = input.shape[1]
    if (running_mean is None) != (running_var is None):
        raise ShapeError("instance_norm: running_mean and running_var must either both be None or neither be None")
    if not use_input_stats and running_mean is None:
        raise ShapeError("instance_norm: running_mean and running_var must be given when use_input_stats=False; "
                         "pass them or use_input_stats=True")
    for vec, what in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                      (bias, "bias")):
        _check_channel_vector("instance_norm", vec, what, channels)
    spatial = input.shape[2:]
    if use_input_stats and all(isinstance(d, int) for d in spatial) and math.prod(spatial) <= 1:
        raise ShapeError(f"instance_norm: expected more than 1 spatial element when training, got input of shape "
                         f"{shown(input.shape)}")


def _instance_norm_rule(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                        momentum=0.1, eps=1e-5):
    _check_instance_norm(input, running_mean, running_var, weight, bias, use_input_stats)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("instance_norm", kind="other", method=False, pure=False, shape_rule=_instance_norm_rule)
def instance_norm(xp, input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalise each channel of each sample of ``(N, C, *)`` inputs over its spatial positions,
    then apply the per-channel affine ``weight`` and ``bias``.

    With ``use_input_stats`` (the default) each instance's statistics normalise it and, when
    given, ``running_mean``/``running_var`` are updated in place with the batch average of
    the instances' statistics (unbiased variance), as PyTorch does; otherwise the running
    statistics normalise the input. Impure for the same reason as `batch_norm`.

    Example:
        >>> y = fxkit.ops.instance_norm(x)  # x: (N, C, H, W)
    """
    _check_instance_norm(input, running_mean, running_var, weight, bias, use_input_stats)
    n, c = input.shape[:2]
    if use_input_stats:
        size = math.prod(input.shape[2:])
        _, mean, scale = _row_statistics(xp, input.reshape(n * c, size), eps)
        mean, scale = mean.reshape(n, c), scale.reshape(n, c)
        if running_mean is not None:
            # the biased variance back from 1 / sqrt(var + eps), then made unbiased
            var = xp.reciprocal(scale * scale) - eps
            running_mean *= 1 - momentum
            running_mean += mean.mean(axis=0) * momentum
            running_var *= 1 - momentum
            running_var += var.mean(axis=0) * (momentum * size / (size - 1))
    else:
        mean = running_mean.reshape(1, c)
        scale = xp.reciprocal(xp.sqrt(running_var + eps)).reshape(1, c)
    if weight is not None:
        scale = scale * weight
    shift = mean * scale
    xp.negative(shift, out=shift)
    if bias is not None:
        shift += bias
    return _channel_affine(xp, input, scale, shift, shift.shape + (1,) * (input.ndim - 2))


def rms_eps(eps, np_dtype):
    """``eps`` of rms_norm: None means the machine epsilon of the dtype the input is computed
    in (float32 for half types, float64 for float64), as in PyTorch."""
    if eps is not None:
        return eps
    return float(np.finfo(np.float64 if np_dtype == np.float64 else np.float32).eps)


def _check_rms_norm(input, normalized_shape, weight):
    norm = _normalized_shape(normalized_shape)
    k = len(norm)
    if k == 0 or len(input.shape) < k or shapes_differ(input.shape[len(input.shape) - k:], norm):
        raise ShapeError(f"rms_norm: given normalized_shape={shown(norm)}, expected an input of shape "
                         f"[*, {shown(norm)[1:-1]}], but got input of shape {shown(input.shape)}")
    require_float("rms_norm", input)
    if weight is not None:
        if shapes_differ(weight.shape, norm):
            raise ShapeError(f"rms_norm: expected weight of the same shape as normalized_shape={shown(norm)}, "
                             f"got weight of shape {shown(weight.shape)}")
        require_float("rms_norm", weight, "weight")
    return norm


def _rms_norm_rule(input, normalized_shape, weight=None, eps=None):
    _check_rms_norm(input, normalized_shape, weight)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("rms_norm", kind="other", method=False, shape_rule=_rms_norm_rule)
def rms_norm(xp, input, normalized_shape, weight=None, eps=None):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dimensions:
    ``input / sqrt(mean(input ** 2) + eps) * weight`` (Llama's RMSNorm).

    ``eps=None`` is the machine epsilon of the input's dtype, as in PyTorch; half
    precision is computed in float32 and rounded once.

    Example:
        >>> y = fxkit.ops.rms_norm(x, (4096,), weight)
    """
    norm = _check_rms_norm(input, normalized_shape, weight)
    eps = rms_eps(eps, input.dtype)
    size = math.prod(norm)
    rows = input.reshape(-1, size)
    if rows.dtype.itemsize < 4 or rows.dtype.kind == BFLOAT16_KIND:
        rows = rows.astype(np.float32)
    scale = xp.matmul(rows[:, None, :], rows[:, :, None]).reshape(rows.shape[0])
    scale /= size
    scale += eps
    xp.sqrt(scale, out=scale)
    xp.reciprocal(scale, out=scale)
    out = rows * scale[:, None]
    if weight is not None:
        out *= weight.reshape(size).astype(out.dtype, copy=False)
    return out.reshape(input.shape).astype(input.dtype, copy=False)
