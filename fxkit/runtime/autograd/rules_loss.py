"""Derivative rules of the losses: nll_loss, cross_entropy, mse_loss.

Class-index losses send ``-w[target] * g`` to each target's log-probability
(by one op, ``nll_loss_backward``; cross_entropy with label smoothing scatters into zeros), with 'mean' dividing
by the summed weights of the counted targets as the forward does; cross_entropy adds label smoothing's
share to every class and goes back through log_softmax. Class weights and
class-index targets have no gradient (as in PyTorch).
"""
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.ops.loss_ops import _reduction
from fxkit.runtime.registry import get_op

_log_softmax = get_op("log_softmax")
_nll_loss_backward = get_op("nll_loss_backward")
_where = get_op("where")
_zeros = get_op("zeros")


def _class_dim(x):
    return 0 if x.ndim == 1 else 1


def _expand_class(v, cdim):
    """A per-target tensor with a size-1 class dimension put back."""
    return v.unsqueeze(cdim)


def _per_target(g, target, weight, ignore_index, reduction, dtype):
    """``(scale, w_t, counted)``: the gradient reaching each target's loss term, the class
    weight of each target (zero where ignored) and the mask of counted targets."""
    counted = target != ignore_index
    safe = _where(counted, target, 0)
    if weight is None:
        w_t = counted.to(dtype)
    else:
        w_t = weight.to(dtype).index_select(0, safe.reshape(-1)).reshape(tuple(target.shape)) * counted
    scale = g / w_t.sum() if reduction == "mean" else g
    return scale, w_t, counted, safe


def _nll_logp_grad(scale, w_t, safe, shape, cdim, like):
    """``d loss / d logp`` of the nll terms ``-w_t * logp[target]``."""
    grad = _zeros(shape, dtype=like.dtype, device=like.device)
    return grad.scatter(cdim, _expand_class(safe, cdim), _expand_class(-(scale * w_t), cdim).to(like.dtype))


@defgrad("nll_loss", saves=("target", "weight"), nondiff=("target", "weight"))
def _nll_loss(ctx, g, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
              reduction="mean"):
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    return _nll_loss_backward(g, target, tuple(input.shape), weight, ignore_index, reduction)


def _class_weights(weight, logp, cdim):
    return weight.to(logp.dtype).reshape((-1,) + (1,) * (logp.ndim - cdim - 1))


@defgrad("cross_entropy", saves=("input", "target", "weight"), nondiff=("weight",))
def _cross_entropy(ctx, g, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                   reduction="mean", label_smoothing=0.0):
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    cdim = _class_dim(input)
    classes = input.shape[cdim]
    logp = _log_softmax(input, cdim)
    s = label_smoothing
    gtarget = None
    if target.dtype.is_floating_point and tuple(target.shape) == tuple(input.shape):  # class probabilities
        if reduction == "none":
            scale = _expand_class(g, cdim)
        else:
            scale = g / (target.numel() // classes) if reduction == "mean" else g
        q = target * (1 - s) + s / classes if s > 0 else target
        wq = q if weight is None else q * _class_weights(weight, logp, cdim)
        glogp = -(scale * wq)
        if ctx.needs(target):
            lw = logp if weight is None else logp * _class_weights(weight, logp, cdim)
            gtarget = -(scale * lw) * (1 - s)
    elif s == 0:
        # class indices: the nll terms' gradient is nll_loss's own (one op where scattering into zeros made a dozen)
        glogp = _nll_loss_backward(g, target, tuple(input.shape), weight, ignore_index, reduction)
    else:
        scale, w_t, counted, safe = _per_target(g, target, weight, ignore_index, reduction, logp.dtype)
        glogp = _nll_logp_grad(scale * (1 - s), w_t, safe, tuple(input.shape), cdim, logp)
        if s > 0:
            share = _expand_class(scale * counted, cdim) * (-s / classes)
            glogp = glogp + (share if weight is None else share * _class_weights(weight, logp, cdim))
    gx = glogp - logp.exp() * glogp.sum(cdim, True) if ctx.needs(input) else None
    return gx, gtarget


@defgrad("mse_loss", saves=("input", "target", "weight"))
def _mse_loss(ctx, g, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    diff = input - target
    if reduction == "mean":
        g = g / (weight.sum() if weight is not None else diff.numel())
    gdiff = diff * g * 2.0
    gw = None
    if weight is not None:
        gdiff = gdiff * weight
        if ctx.needs(weight):
            squared = diff * diff
            # 'mean' divides by weight.sum(): each weight also moves the denominator
            gw = (squared - (squared * weight).sum() / weight.sum()) * g if reduction == "mean" else squared * g
    return gdiff, -gdiff, None, None, None, gw
