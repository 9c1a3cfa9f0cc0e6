"""Cases for fxkit/runtime/ops/norm_ops.py: batch_norm, layer_norm, group_norm, instance_norm, rms_norm.

The running-statistics updates of training-mode batch_norm and instance_norm are checked against
PyTorch in tests/runtime/test_nn_ops_effects.py (the harness compares returns only).
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randpos, torch_ref

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def batch_norm_ref(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                   eps=1e-5):
    """Textbook batch norm in float64: normalise per channel, then the affine map."""
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = running_mean, running_var
    shape = _channel_shape(x)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _bn_args(r, *shape, affine=True, dtype=np.float32):
    c = shape[1]
    args = (randf(r, *shape, dtype=dtype), randf(r, c, dtype=dtype), randpos(r, c, dtype=dtype))
    if affine:
        args += (randf(r, c, dtype=dtype), randf(r, c, dtype=dtype))
    return args


def _torch_bn(x, rm, rv, *rest, **kw):
    import torch.nn.functional as F

    return F.batch_norm(x, rm, rv, *rest, **kw)


for _ref, _tag in ((batch_norm_ref, ""), (torch_ref(_torch_bn), "_torch")):
    case("batch_norm", lambda r: (_bn_args(r, 8, 3), {}), _ref, id="NC_eval" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 4, 3, 7), {}), _ref, id="NCL_eval" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 2, 3, 5, 4), {}), _ref, id="NCHW_eval" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 2, 3, 5, 4, affine=False), {"eps": 1e-3}), _ref,
         id="NCHW_eval_no_affine_eps" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 2, 3, 5, 4), {"training": True, "momentum": 0.3}), _ref,
         id="NCHW_train" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 6, 4), {"training": True}), _ref, id="NC_train" + _tag, **TOL)
    case("batch_norm", lambda r: ((randf(r, 3, 4, 5), None, None), {"training": True}), _ref,
         id="train_no_running_stats" + _tag, **TOL)
    case("batch_norm", lambda r: ((randf(r, 4, 3, 6)[:, :, ::2],) + _bn_args(r, 1, 3)[1:], {}), _ref,
         id="non_contiguous" + _tag, **TOL)
    case("batch_norm", lambda r: (_bn_args(r, 3, 2, 4, 4, dtype=np.float64), {"training": True}), _ref,
         id="float64" + _tag, rtol=1e-10, atol=1e-12)
    case("batch_norm", lambda r: (_bn_args(r, 0, 3, 4, 4), {}), _ref, id="empty_batch_eval" + _tag)


def layer_norm_ref(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _torch_ln(x, normalized_shape, *rest, **kw):
    import torch.nn.functional as F

    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return F.layer_norm(x, shape, *rest, **kw)


for _ref, _tag in ((layer_norm_ref, ""), (torch_ref(_torch_ln), "_torch")):
    case("layer_norm", lambda r: ((randf(r, 4, 6), 6, randf(r, 6), randf(r, 6)), {}), _ref, id="int_shape" + _tag,
         **TOL)
    case("layer_norm", lambda r: ((randf(r, 2, 3, 4, 5), (4, 5), randf(r, 4, 5), randf(r, 4, 5)), {}), _ref,
         id="multi_dim" + _tag, **TOL)
    case("layer_norm", lambda r: ((randf(r, 2, 3, 4, 5), [3, 4, 5]), {"eps": 1e-2}), _ref,
         id="no_affine_eps" + _tag, **TOL)
    case("layer_norm", lambda r: ((randf(r, 6, 5).T, (6,), randf(r, 6)), {}), _ref, id="non_contiguous_weight_only"
         + _tag, **TOL)
    case("layer_norm", lambda r: ((randf(r, 3, 8, dtype=np.float64), (8,), randf(r, 8, dtype=np.float64),
                                   randf(r, 8, dtype=np.float64)), {}), _ref, id="float64" + _tag,
         rtol=1e-10, atol=1e-12)
    case("layer_norm", lambda r: ((randf(r, 0, 5), (5,), randf(r, 5), randf(r, 5)), {}), _ref, id="empty" + _tag)


def group_norm_ref(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, (c // num_groups) * int(np.prod(x.shape[2:])))
    mean = g.mean(axis=-1, keepdims=True)
    var = g.var(axis=-1, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = _channel_shape(x)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _torch_gn(*args, **kw):
    import torch.nn.functional as F

    return F.group_norm(*args, **kw)


for _ref, _tag in ((group_norm_ref, ""), (torch_ref(_torch_gn), "_torch")):
    case("group_norm", lambda r: ((randf(r, 2, 6, 4, 5), 3, randf(r, 6), randf(r, 6)), {}), _ref,
         id="NCHW" + _tag, **TOL)
    case("group_norm", lambda r: ((randf(r, 2, 6, 7), 1), {}), _ref, id="one_group" + _tag, **TOL)
    case("group_norm", lambda r: ((randf(r, 3, 4, 5, 5), 4, randf(r, 4)), {"eps": 1e-3}), _ref,
         id="instance_norm_like" + _tag, **TOL)
    case("group_norm", lambda r: ((randf(r, 5, 8), 2, randf(r, 8), randf(r, 8)), {}), _ref, id="NC" + _tag, **TOL)
    case("group_norm", lambda r: ((randf(r, 2, 4, 6, 6)[:, :, ::2, 1:], 2, randf(r, 4), randf(r, 4)), {}), _ref,
         id="non_contiguous" + _tag, **TOL)
    case("group_norm", lambda r: ((randf(r, 0, 4, 3), 2, randf(r, 4), randf(r, 4)), {}), _ref,
         id="empty_batch" + _tag)


def instance_norm_ref(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                      momentum=0.1, eps=1e-5):
    """Each (sample, channel) normalised over its spatial positions, or by the running statistics."""
    axes = tuple(range(2, x.ndim))
    shape = _channel_shape(x)
    if use_input_stats:
        mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _torch_in(*args, **kw):
    import torch.nn.functional as F

    return F.instance_norm(*args, **kw)


for _ref, _tag in ((instance_norm_ref, ""), (torch_ref(_torch_in), "_torch")):
    case("instance_norm", lambda r: ((randf(r, 2, 3, 4, 5),), {}), _ref, id="NCHW" + _tag, **TOL)
    case("instance_norm", lambda r: ((randf(r, 3, 4, 7), None, None, randf(r, 4), randf(r, 4)), {"eps": 1e-3}),
         _ref, id="NCL_affine" + _tag, **TOL)
    case("instance_norm", lambda r: (_bn_args(r, 2, 3, 4, 4), {"momentum": 0.2}), _ref,
         id="running_stats_updated" + _tag, **TOL)
    case("instance_norm", lambda r: (_bn_args(r, 2, 3, 4, 4), {"use_input_stats": False}), _ref,
         id="running_stats_used" + _tag, **TOL)
    case("instance_norm", lambda r: ((randf(r, 2, 4, 6, 6)[:, :, ::2, 1:],), {}), _ref, id="non_contiguous" + _tag,
         **TOL)
    case("instance_norm", lambda r: ((randf(r, 2, 3, 5, 4, dtype=np.float64), None, None,
                                      randf(r, 3, dtype=np.float64), randf(r, 3, dtype=np.float64)), {}), _ref,
         id="float64" + _tag, rtol=1e-10, atol=1e-12)
    case("instance_norm", lambda r: ((randf(r, 0, 3, 4),), {}), _ref, id="empty_batch" + _tag)


def in_float64(reference):
    """``reference`` computed on float64 copies of its float arrays: a float16 case is checked against the
    exact values (the float16 reference itself rounds at every step: its mean, variance and quotient were off
    by up to 4e-3 from the exact instance norm of 8 values, beyond the float16 output's own rounding)."""
    def exact(*args, **kwargs):
        return reference(*(a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                           for a in args), **kwargs)
    return exact


case("instance_norm", lambda r: ((randf(r, 2, 3, 8, dtype=np.float16),), {}), in_float64(instance_norm_ref),
     id="float16", rtol=2e-3, atol=2e-3)


def rms_norm_ref(x, normalized_shape, weight=None, eps=None):
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    if eps is None:
        eps = float(np.finfo(np.float32).eps)  # the float32 inputs' machine epsilon
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if weight is None else y * weight


def _torch_rms(x, normalized_shape, *rest, **kw):
    import torch.nn.functional as F

    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return F.rms_norm(x, shape, *rest, **kw)


for _ref, _tag in ((rms_norm_ref, ""), (torch_ref(_torch_rms), "_torch")):
    case("rms_norm", lambda r: ((randf(r, 4, 6), 6, randf(r, 6)), {}), _ref, id="int_shape" + _tag, **TOL)
    case("rms_norm", lambda r: ((randf(r, 2, 3, 4, 5), (4, 5), randf(r, 4, 5)), {"eps": 1e-6}), _ref,
         id="multi_dim_eps" + _tag, **TOL)
    case("rms_norm", lambda r: ((randf(r, 2, 3, 8), [8]), {"eps": 1e-2}), _ref, id="no_weight" + _tag, **TOL)
    case("rms_norm", lambda r: ((randf(r, 6, 5).T, (6,), randf(r, 6)), {"eps": 1e-5}), _ref,
         id="non_contiguous" + _tag, **TOL)
    case("rms_norm", lambda r: ((randf(r, 0, 5), (5,), randf(r, 5)), {"eps": 1e-5}), _ref, id="empty" + _tag)
case("rms_norm", lambda r: ((randf(r, 3, 8, dtype=np.float64), (8,), randf(r, 8, dtype=np.float64)), {"eps": 1e-6}),
     rms_norm_ref, id="float64", rtol=1e-12, atol=1e-14)
case("rms_norm", lambda r: ((randf(r, 3, 8, dtype=np.float64) * 1e-7, (8,)), {}),
     torch_ref(_torch_rms), id="float64-default-eps-torch", rtol=1e-12, atol=1e-14)
case("rms_norm", lambda r: ((randf(r, 4, 16, dtype=np.float16), (16,), randf(r, 16, dtype=np.float16)), {}),
     in_float64(rms_norm_ref), id="float16", rtol=2e-3, atol=2e-3)
