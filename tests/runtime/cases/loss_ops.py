"""Cases for fxkit/runtime/ops/loss_ops.py: nll_loss, cross_entropy, mse_loss.

The numpy references write each loss as PyTorch documents it (one sum over
classes with a smoothed one-hot target), independently of the op's
nll-plus-smoothing split.
"""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, randpos, torch_ref

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _torch_f(name):
    def call(*args, **kw):
        import torch.nn.functional as F

        return getattr(F, name)(*args, **kw)

    return torch_ref(call)


def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _reduce(loss, denominator, reduction):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    with np.errstate(invalid="ignore"):
        return loss.sum() / denominator


def _class_loss(logp, target, weight, ignore_index, reduction, smoothing):
    """-sum_c w_c q_c log p_c per target, q the (smoothed) one-hot target;
    'mean' divides by the summed weights w[target] of the counted targets."""
    cdim = 0 if logp.ndim == 1 else 1
    classes = logp.shape[cdim]
    lp = np.moveaxis(logp, cdim, -1)
    w = np.ones(classes) if weight is None else weight
    counted = target != ignore_index
    safe = np.where(counted, target, 0)
    q = np.eye(classes)[safe] * (1 - smoothing) + smoothing / classes
    loss = -(w * q * lp).sum(axis=-1) * counted
    return _reduce(loss, (w[safe] * counted).sum(), reduction)


def nll_loss_ref(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    return _class_loss(logp, target, weight, ignore_index, reduction, 0.0)


def cross_entropy_ref(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    cdim = 0 if x.ndim == 1 else 1
    logp = _log_softmax(x, cdim)
    if target.shape != x.shape:
        return _class_loss(logp, target, weight, ignore_index, reduction, label_smoothing)
    classes = x.shape[cdim]
    q = target * (1 - label_smoothing) + label_smoothing / classes
    w = np.ones(classes) if weight is None else weight
    w = w.reshape((-1,) + (1,) * (x.ndim - cdim - 1))
    loss = -(w * q * logp).sum(axis=cdim)
    return _reduce(loss, x.size // classes, reduction)


def _ignored(target, every=3):
    target = target.copy()
    target.reshape(-1)[::every] = -100
    return target


def _probs(r, *shape, axis=1):
    e = np.exp(randf(r, *shape, dtype=np.float64))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


# -- nll_loss -------------------------------------------------------------
for _ref, _tag in ((nll_loss_ref, ""), (_torch_f("nll_loss"), "_torch")):
    for _reduction in ("mean", "sum", "none"):
        case("nll_loss", lambda r, red=_reduction: ((randf(r, 6, 4), randi(r, 6, low=0, high=4)),
                                                    {"reduction": red}), _ref, id=f"NC_{_reduction}" + _tag, **TOL)
        case("nll_loss", lambda r, red=_reduction: ((randf(r, 6, 4), randi(r, 6, low=0, high=4), randpos(r, 4)),
                                                    {"reduction": red}), _ref, id=f"weight_{_reduction}" + _tag,
             **TOL)
        case("nll_loss", lambda r, red=_reduction: ((randf(r, 2, 4, 3, 5), _ignored(randi(r, 2, 3, 5, low=0, high=4))),
                                                    {"reduction": red, "weight": randpos(r, 4)}), _ref,
             id=f"NCd_ignore_weight_{_reduction}" + _tag, **TOL)
    case("nll_loss", lambda r: ((randf(r, 5), np.array(3)), {}), _ref, id="unbatched" + _tag, **TOL)
    case("nll_loss", lambda r: ((randf(r, 4, 7).T, randi(r, 7, low=0, high=4)), {"ignore_index": 2}), _ref,
         id="non_contiguous_ignore_in_range" + _tag, **TOL)
    case("nll_loss", lambda r: ((randf(r, 3, 4), np.full(3, -100)), {}), _ref, id="all_ignored_nan" + _tag)
    case("nll_loss", lambda r: ((randf(r, 0, 4), randi(r, 0, low=0, high=4)), {"reduction": "sum"}), _ref,
         id="empty_sum" + _tag)
    case("nll_loss", lambda r: ((randf(r, 6, 4, dtype=np.float64), randi(r, 6, low=0, high=4)), {}), _ref,
         id="float64" + _tag)
case("nll_loss", lambda r: ((randf(r, 6, 4), randi(r, 6, low=0, high=4)), {"reduce": False}),
     lambda x, t, reduce: nll_loss_ref(x, t, reduction="none"), id="legacy_reduce_false", **TOL)
case("nll_loss", lambda r: ((randf(r, 6, 4), randi(r, 6, low=0, high=4), None, False), {}),
     lambda x, t, w, size_average: nll_loss_ref(x, t, reduction="sum"), id="legacy_size_average_false", **TOL)

case("nll_loss", lambda r: ((randf(r, 5), np.array(2)), {"ignore_index": 2}), nll_loss_ref,
     id="unbatched_all_ignored_nan")


# -- nll_loss_backward ----------------------------------------------------
def nll_loss_backward_ref(g, target, input_shape, weight=None, ignore_index=-100, reduction="mean"):
    """-w[t] * g at each counted target's class (over the summed weights for 'mean'), zero elsewhere and
    at ignored targets, in float64."""
    cdim = 0 if len(input_shape) == 1 else 1
    classes = input_shape[cdim]
    w = np.ones(classes) if weight is None else weight.astype(np.float64)
    counted = target != ignore_index
    safe = np.where(counted, target, 0)
    wt = w[safe] * counted
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = g / wt.sum() if reduction == "mean" else g
        per = np.where(counted, -(scale * wt), 0.0)
    onehot = np.eye(classes)[safe] * per[..., None]
    return np.moveaxis(onehot, -1, cdim).astype(g.dtype)


def _grad(r, *shape, dtype=np.float32):
    """A loss's gradient: an array even when 0-d."""
    return np.asarray(randf(r, *shape, dtype=dtype))


for _reduction in ("mean", "sum", "none"):
    case("nll_loss_backward", lambda r, red=_reduction: (
        (_grad(r, *((6,) if red == "none" else ())), randi(r, 6, low=0, high=4), (6, 4)), {"reduction": red}),
        nll_loss_backward_ref, id=f"NC_{_reduction}", **TOL)
    case("nll_loss_backward", lambda r, red=_reduction: (
        (_grad(r, *((2, 3, 5) if red == "none" else ())), _ignored(randi(r, 2, 3, 5, low=0, high=4)), (2, 4, 3, 5)),
        {"reduction": red, "weight": randpos(r, 4)}), nll_loss_backward_ref, id=f"NCd_ignore_weight_{_reduction}",
        **TOL)
case("nll_loss_backward", lambda r: ((_grad(r), np.array(3), (5,)), {}), nll_loss_backward_ref, id="unbatched", **TOL)
case("nll_loss_backward", lambda r: ((_grad(r), np.full(3, 1), (3, 4)), {"ignore_index": 1}), nll_loss_backward_ref,
     id="all_ignored_zero")
case("nll_loss_backward", lambda r: ((_grad(r, dtype=np.float64), randi(r, 6, low=0, high=4), (6, 4)),
                                     {"weight": randpos(r, 4, dtype=np.float64)}), nll_loss_backward_ref,
     id="float64")


# -- cross_entropy --------------------------------------------------------
for _ref, _tag in ((cross_entropy_ref, ""), (_torch_f("cross_entropy"), "_torch")):
    for _reduction in ("mean", "sum", "none"):
        case("cross_entropy", lambda r, red=_reduction: ((randf(r, 6, 5), randi(r, 6, low=0, high=5)),
                                                         {"reduction": red}), _ref, id=f"NC_{_reduction}" + _tag,
             **TOL)
        case("cross_entropy", lambda r, red=_reduction: ((randf(r, 6, 5), _ignored(randi(r, 6, low=0, high=5))),
                                                         {"reduction": red, "weight": randpos(r, 5),
                                                          "label_smoothing": 0.2}), _ref,
             id=f"weight_ignore_smoothing_{_reduction}" + _tag, **TOL)
        case("cross_entropy", lambda r, red=_reduction: ((randf(r, 2, 4, 3, 3), _probs(r, 2, 4, 3, 3)),
                                                         {"reduction": red, "weight": randf(r, 4),
                                                          "label_smoothing": 0.1}), _ref,
             id=f"probs_weight_smoothing_{_reduction}" + _tag, **TOL)
        case("cross_entropy", lambda r, red=_reduction: ((randf(r, 2, 4, 7), randi(r, 2, 7, low=0, high=4)),
                                                         {"reduction": red, "label_smoothing": 0.3}), _ref,
             id=f"NCd_smoothing_{_reduction}" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 6, 5), _ignored(randi(r, 6, low=0, high=5)), randpos(r, 5)), {}), _ref,
         id="weight_ignore" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 6, 5), _ignored(randi(r, 6, low=0, high=5))),
                                     {"label_smoothing": 0.25}), _ref, id="ignore_smoothing" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 5, 3), _probs(r, 5, 3)), {}), _ref, id="probs" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 5), _probs(r, 5, axis=0)), {"label_smoothing": 0.1}), _ref,
         id="probs_unbatched" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 5), np.array(1)), {}), _ref, id="unbatched" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 5, 8).T * 20, randi(r, 8, low=0, high=5)), {}), _ref,
         id="non_contiguous_large_logits" + _tag, **TOL)
    case("cross_entropy", lambda r: ((randf(r, 0, 5), randi(r, 0, low=0, high=5)), {}), _ref,
         id="empty_mean_nan" + _tag)
    case("cross_entropy", lambda r: ((randf(r, 4, 3), _probs(r, 4, 3).astype(np.float64)), {}), _ref,
         id="probs_float64_target_promotes" + _tag, dtype=fxkit.float64, **TOL)


# -- mse_loss -------------------------------------------------------------
def mse_loss_ref(x, target, reduction="mean", weight=None):
    loss = (x - target) ** 2
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, loss.size if weight is None else weight.sum(), reduction)


for _ref, _tag in ((mse_loss_ref, ""), (_torch_f("mse_loss"), "_torch")):
    for _reduction in ("mean", "sum", "none"):
        case("mse_loss", lambda r, red=_reduction: ((randf(r, 4, 5), randf(r, 4, 5)), {"reduction": red}), _ref,
             id=f"{_reduction}" + _tag, **TOL)
        case("mse_loss", lambda r, red=_reduction: ((randf(r, 4, 5), randf(r, 4, 5)),
                                                    {"reduction": red, "weight": randpos(r, 4, 5)}), _ref,
             id=f"weight_{_reduction}" + _tag, **TOL)
    case("mse_loss", lambda r: ((randf(r, 5, 4).T, randf(r, 4, 5)), {}), _ref, id="non_contiguous" + _tag, **TOL)
    case("mse_loss", lambda r: ((randf(r, 3), randf(r, 3, dtype=np.float64)), {}), _ref,
         id="float64_target_promotes" + _tag, dtype=fxkit.float64)
    case("mse_loss", lambda r: ((randf(r, 0, 3), randf(r, 0, 3)), {}), _ref, id="empty_mean_nan" + _tag)
case("mse_loss", lambda r: ((randf(r, 4, 5), randf(r, 4, 5), False), {}),
     lambda x, t, size_average: mse_loss_ref(x, t, "sum"), id="legacy_size_average_false", **TOL)
