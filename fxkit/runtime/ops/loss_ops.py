"""Losses: ``nll_loss``, ``cross_entropy``, ``mse_loss``, as in ``torch.nn.functional``.

The signatures keep PyTorch's deprecated ``size_average`` and ``reduce``
arguments in their positions, so positional calls written for PyTorch mean
the same here; when given they override ``reduction`` as in PyTorch.

The class dimension is 1 for ``(N, C)`` and ``(N, C, d1, ...)`` inputs and 0
for an unbatched ``(C,)`` input. ``reduction='mean'`` over class targets
divides by the summed weights of the counted (non-ignored) targets, so an
all-ignored batch gives NaN like PyTorch. bfloat16 losses are computed in
float32 and rounded once, as in PyTorch (`low_precision.run_in_float32`).
"""
import warnings

import numpy as np

from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import dims_differ, dtype_of, require_float, require_integer, shapes_differ, shown
from fxkit.runtime.ops.softmax import log_softmax

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(name, size_average, reduce, reduction):
    """PyTorch's ``_Reduction.legacy_get_string`` and the check of ``reduction``."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "mean" if size_average and reduce else ("sum" if reduce else "none")
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{name}: reduction={reduction!r} is not valid; use 'none', 'mean' or 'sum'")
    return reduction


def _class_dim(input):
    return 0 if len(input.shape) == 1 else 1


def _check_class_target(name, input, target, weight):
    """Shapes of ``input`` (N, C, d1, ...) or (C,) against class-index ``target``."""
    if len(input.shape) == 0:
        raise ShapeError(f"{name}: expected an input of shape (C,), (N, C) or (N, C, d1, ...), got a 0-d input")
    require_float(name, input)
    require_integer(name, target, "target")
    cdim = _class_dim(input)
    expected = input.shape[:cdim] + input.shape[cdim + 1:]
    if shapes_differ(target.shape, expected):
        raise ShapeError(f"{name}: expected target of shape {shown(expected)} for input of shape "
                         f"{shown(input.shape)} (class dimension {cdim} removed), got target of shape "
                         f"{shown(target.shape)}")
    classes = input.shape[cdim]
    if weight is not None and (len(weight.shape) != 1 or dims_differ(weight.shape[0], classes)):
        raise ShapeError(f"{name}: weight should hold one value for each of the {classes} classes, got weight "
                         f"of shape {shown(weight.shape)}")
    if weight is not None:
        require_float(name, weight, "weight")


def _safe_targets(xp, name, target, classes, ignore_index):
    """Check the class indices; return them with ignored ones replaced by 0, and
    the mask of counted targets (None when every target counts)."""
    if not target.size:
        return target, None
    low, high = int(target.min()), int(target.max())
    if low >= 0 and high < classes and not (low <= ignore_index <= high):
        return target, None
    counted = target != ignore_index
    bad = counted & ((target < 0) | (target >= classes))
    if bad.any():
        value = int(target[bad].reshape(-1)[0])
        raise IndexOutOfRangeError(f"{name}: target {value} is out of bounds for C={classes} classes (expected "
                                   f"0 <= target < {classes}, or ignore_index={ignore_index})")
    return xp.where(counted, target, 0), counted


def _nll_terms(xp, name, logp, target, weight, ignore_index):
    """Per-target losses ``-w[t] * logp[..., t, ...]``, the mask of counted targets
    (None when none is ignored) and the weights ``w[t]`` (zero where ignored; None
    when all are one)."""
    cdim = _class_dim(logp)
    t, counted, w = _target_weights(xp, name, target, logp.shape[cdim], weight, ignore_index, logp.dtype)
    if logp.ndim == 2:  # (N, C): one fancy index (take_along_axis builds its index in Python, ~8 us)
        picked = logp[xp.arange(t.shape[0]), t]
    else:
        picked = xp.take_along_axis(logp, _with_class_dim(t, cdim), axis=cdim).squeeze(cdim)
    # NOTE: asarray: an unbatched input's 0-d product is a numpy scalar, which cannot take an ``out``
    loss = picked if w is None else xp.asarray(picked * w)
    return xp.negative(loss, out=loss), counted, w


def _target_weights(xp, name, target, classes, weight, ignore_index, dtype):
    """``(targets, counted, weights)``: the class indices with ignored ones replaced by 0, the mask of counted
    targets (None when every one counts) and each target's class weight in ``dtype``, zero where ignored
    (None when all are one)."""
    t, counted = _safe_targets(xp, name, target, classes, ignore_index)
    w = None if weight is None else weight.astype(dtype, copy=False)[t]
    if counted is not None:
        w = counted.astype(dtype) if w is None else w * counted
    return t, counted, w


def _with_class_dim(v, cdim):
    """``v`` (one value per target) with a size-1 class dimension at ``cdim`` (numpy's expand_dims, without
    its Python-level axis normalisation)."""
    return v.reshape(v.shape[:cdim] + (1,) + v.shape[cdim:])


def _reduce(loss, w, reduction):
    """Apply ``reduction``; 'mean' divides by the summed weights ``w`` (or the count
    when ``w`` is None), giving NaN when that is zero, like PyTorch."""
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / (loss.size if w is None else w.sum())


def _nll_rule(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    _check_class_target("nll_loss", input, target, weight)
    return TensorMeta(tuple(target.shape) if reduction == "none" else (), input.dtype, input.device)


@op("nll_loss", kind="reduction", method=False, shape_rule=_nll_rule)
def nll_loss(xp, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of class indices ``target`` under log-probabilities ``input``.

    Example:
        >>> loss = fxkit.ops.nll_loss(log_probs, labels)  # (N, C), (N,) -> ()
    """
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    _check_class_target("nll_loss", input, target, weight)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(nll_loss.impl, xp, input, target, weight, ignore_index=ignore_index, reduction=reduction)
    loss, _, w = _nll_terms(xp, "nll_loss", input, target, weight, ignore_index)
    return _reduce(loss, w, reduction)


class _ShapeOf:
    """What `_check_class_target` reads of an input known only by its shape (nll_loss_backward's)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def _nll_backward_rule(grad_output, target, input_shape, weight=None, ignore_index=-100, reduction="mean"):
    _reduction("nll_loss_backward", None, None, reduction)
    _check_class_target("nll_loss_backward", _ShapeOf(input_shape, grad_output.dtype), target, weight)
    return TensorMeta(tuple(input_shape), grad_output.dtype, grad_output.device)


@op("nll_loss_backward", kind="other", method=False, shape_rule=_nll_backward_rule)
def nll_loss_backward(xp, grad_output, target, input_shape, weight=None, ignore_index=-100, reduction="mean"):
    """The gradient of ``nll_loss(input, target, weight, ignore_index=..., reduction=...)`` with respect to
    its input of shape ``input_shape``, given the loss's gradient (``aten.nll_loss_backward``): ``-w[t] * g``
    at each counted target's class, divided by the summed weights for 'mean', zero elsewhere (an ignored
    target's too, as in PyTorch, where the older scatter wrote 0 * NaN when every target was ignored).

    One op where the rule's dozen small ones (mask, weights, sums, scatter) each paid eager dispatch: the
    digits Net's loss backward took 63 us a step. The arithmetic is theirs: the same sum of the same
    weights, the same products, in the gradient's dtype.
    """
    reduction = _reduction("nll_loss_backward", None, None, reduction)
    dtype = grad_output.dtype
    _check_class_target("nll_loss_backward", _ShapeOf(input_shape, dtype), target, weight)
    if dtype.kind == BFLOAT16_KIND:
        return run_in_float32(nll_loss_backward.impl, xp, grad_output, target, input_shape, weight, ignore_index,
                              reduction)
    cdim = 0 if len(input_shape) == 1 else 1
    t, counted, w = _target_weights(xp, "nll_loss_backward", target, input_shape[cdim], weight, ignore_index, dtype)
    with np.errstate(invalid="ignore", divide="ignore"):  # all ignored: 0 / 0, NaN as in PyTorch
        scale = grad_output / (w.sum() if w is not None else dtype.type(t.size)) if reduction == "mean" else grad_output
        picked = xp.negative(scale if w is None else scale * w)
    classes = xp.arange(input_shape[cdim]).reshape((-1,) + (1,) * (len(input_shape) - cdim - 1))
    hit = _with_class_dim(t, cdim) == classes
    if counted is not None:
        hit &= _with_class_dim(counted, cdim)  # an ignored target's gradient is zero, even when scale is NaN
    picked = xp.asarray(picked, dtype)
    out = xp.zeros(tuple(input_shape), dtype)
    xp.copyto(out, picked if picked.ndim == 0 else _with_class_dim(picked, cdim), where=hit)
    return out


def _check_cross_entropy(input, target, weight, label_smoothing):
    """Check the arguments; True when ``target`` holds class probabilities (PyTorch's
    rule: a target of the input's shape does), False for class indices."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ShapeError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if len(input.shape) != len(target.shape) or shapes_differ(input.shape, target.shape):
        _check_class_target("cross_entropy", input, target, weight)
        return False
    require_float("cross_entropy", input)
    require_float("cross_entropy", target, "target")
    classes = input.shape[_class_dim(input)]
    if weight is not None and (len(weight.shape) != 1 or dims_differ(weight.shape[0], classes)):
        raise ShapeError(f"cross_entropy: weight should hold one value for each of the {classes} classes, got "
                         f"weight of shape {shown(weight.shape)}")
    return True


def _cross_entropy_rule(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                        reduction="mean", label_smoothing=0.0):
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    if _check_cross_entropy(input, target, weight, label_smoothing):
        cdim = _class_dim(input)
        dtype, shape = _dt.promote_types(input.dtype, target.dtype), input.shape[:cdim] + input.shape[cdim + 1:]
    else:
        dtype, shape = input.dtype, target.shape
    return TensorMeta(tuple(shape) if reduction == "none" else (), dtype, input.device)


def _broadcast_weight(weight, logp, cdim):
    return weight.astype(logp.dtype, copy=False).reshape((-1,) + (1,) * (logp.ndim - cdim - 1))


@op("cross_entropy", kind="reduction", method=False, shape_rule=_cross_entropy_rule)
def cross_entropy(xp, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross entropy between the logits ``input`` and ``target``: class indices of
    shape ``(N, d1, ...)``, or class probabilities of the input's shape.

    ``label_smoothing`` mixes the target with the uniform distribution over the
    ``C`` classes, with PyTorch's formula (for class indices:
    ``(1 - s) * nll + s / C * sum_c(-w_c * log p_c)``). ``ignore_index`` applies
    to class indices only.

    Example:
        >>> loss = fxkit.ops.cross_entropy(logits, labels, label_smoothing=0.1)
    """
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    probabilities = _check_cross_entropy(input, target, weight, label_smoothing)
    if input.dtype.kind == BFLOAT16_KIND and (not probabilities or target.dtype == input.dtype):
        return run_in_float32(cross_entropy.impl, xp, input, target, weight, ignore_index=ignore_index,
                              reduction=reduction, label_smoothing=label_smoothing)
    cdim = _class_dim(input)
    classes = input.shape[cdim]
    logp = log_softmax.impl(xp, input, cdim)
    if probabilities:
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        prod = logp * target
        if weight is not None:
            prod *= _broadcast_weight(weight, logp, cdim)
        return _reduce(xp.negative(prod.sum(axis=cdim)), None, reduction)
    loss, counted, w = _nll_terms(xp, "cross_entropy", logp, target, weight, ignore_index)
    if label_smoothing > 0:
        smooth = logp * _broadcast_weight(weight, logp, cdim) if weight is not None else logp
        smooth = -smooth.sum(axis=cdim)
        if counted is not None:
            smooth *= counted
        loss *= 1 - label_smoothing
        smooth *= label_smoothing / classes
        loss += smooth
    return _reduce(loss, w, reduction)


def _check_mse(input, target, weight):
    shape = broadcast_shapes(input.shape, target.shape, op_name="mse_loss")
    dtype = _dt.promote_types(dtype_of(input), dtype_of(target))
    if not dtype.is_floating_point:
        raise DTypeError(f"mse_loss: expected floating-point input and target, got {dtype_of(input).name} and "
                         f"{dtype_of(target).name}; cast them first, e.g. input.float()")
    if weight is not None and shapes_differ(weight.shape, input.shape):
        raise ShapeError(f"mse_loss: weight and input must have the same size, got weight of shape "
                         f"{shown(weight.shape)} and input of shape {shown(input.shape)}")
    return shape, dtype


def _mse_rule(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    shape, dtype = _check_mse(input, target, weight)
    if weight is not None:
        dtype = _dt.promote_types(dtype, dtype_of(weight))
    return TensorMeta(tuple(shape) if reduction == "none" else (), dtype, input.device)


@op("mse_loss", kind="reduction", method=False, shape_rule=_mse_rule)
def mse_loss(xp, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error ``(input - target) ** 2``, optionally weighted elementwise
    by ``weight`` (of the input's shape; ``'mean'`` then divides by ``weight.sum()``).

    Different input and target shapes broadcast with PyTorch's warning.

    Example:
        >>> loss = fxkit.ops.mse_loss(prediction, target)
    """
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    _, dtype = _check_mse(input, target, weight)
    if dtype is _dt.bfloat16 and (weight is None or weight.dtype.kind == BFLOAT16_KIND):
        return run_in_float32(mse_loss.impl, xp, input, target, reduction=reduction, weight=weight)
    # numpy computes int64 - float32 in float64: cast to PyTorch's result dtype first.
    input, target = input.astype(dtype.np, copy=False), target.astype(dtype.np, copy=False)
    if weight is not None and weight.dtype.kind != "f":
        weight = weight.astype(dtype.np)
    if input.shape != target.shape:
        warnings.warn(f"mse_loss: using a target size ({list(target.shape)}) that is different to the input size "
                      f"({list(input.shape)}); this will likely lead to incorrect results due to broadcasting. "
                      f"Please ensure they have the same size.", stacklevel=4)
    loss = xp.subtract(input, target)
    xp.square(loss, out=loss)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, weight, reduction)
