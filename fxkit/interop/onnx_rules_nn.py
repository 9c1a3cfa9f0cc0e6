"""ONNX export rules of matmul, convolution, pooling, normalisation, softmax,
reduction and embedding ops, and of the layers exported without tracing.

Export describes inference, as ``torch.onnx.export``'s default does: dropout
is the identity and batch norm uses its running statistics. A graph traced in
training mode (``dropout(..., training=True)``) is refused with a hint.
"""
import math

import numpy as np

from fxkit.interop.onnx_builder import Value
from fxkit.interop.onnx_rules import axis, concrete, export_rule, module_rule, operands, unsupported
from fxkit.runtime import dtypes as _dt
from fxkit.runtime import nn
from fxkit.runtime.registry import get_op


def _pairs(value, n):
    return list(value) if isinstance(value, (tuple, list)) else [value] * n


def _axes(dim, rank):
    """``dim`` (None, an int or a sequence; None or ``()`` mean all) as non-negative axes."""
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return list(range(rank))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return [axis(d, rank) for d in dims]


# -- matmul --------------------------------------------------------------------------------
@export_rule("matmul", "mm", "bmm")
def _matmul(b, op, a, out):
    return b.op("MatMul", *operands(b, op, out, a.input, a.other if op.name == "matmul" else a.mat2))


@export_rule("linear")
def _linear(b, op, a, out):
    x, w = a.input.name, a.weight.name
    bias = a.bias.name if isinstance(a.bias, Value) else None
    if len(a.input.meta.shape) == 2:
        return b.op("Gemm", x, w, bias, transB=1)
    # Gemm wants matrices: fold the leading dims in and out again, which keeps the weight
    # in its (out, in) layout (a re-imported model has the same parameters).
    rows = b.op("Reshape", x, b.ints([-1, a.weight.meta.shape[1]]))
    return b.reshape(b.op("Gemm", rows, w, bias, transB=1), out.shape)


@export_rule("addmm")
def _addmm(b, op, a, out):
    return b.op("Gemm", a.mat1.name, a.mat2.name, a.input.name, alpha=float(a.alpha), beta=float(a.beta))


@export_rule("baddbmm")
def _baddbmm(b, op, a, out):
    product = b.op("MatMul", a.batch1.name, a.batch2.name)
    if a.alpha != 1:
        product = b.op("Mul", product, b.scalar(a.alpha, out.dtype))
    if a.beta == 0:
        return product
    base = a.input.name if a.beta == 1 else b.op("Mul", a.input.name, b.scalar(a.beta, out.dtype))
    return b.op("Add", base, product)


@export_rule("einsum")
def _einsum(b, op, a, out):
    tensors = a.operands[0] if len(a.operands) == 1 and isinstance(a.operands[0], (tuple, list)) else a.operands
    return b.op("Einsum", *(t.name for t in tensors), equation=a.equation.replace(" ", ""))


# -- convolution and pooling -----------------------------------------------------------------
def _conv_pads(op, padding, kernel, dilation):
    n = len(kernel)
    if padding == "valid":
        return [0] * (2 * n)
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [t // 2 for t in totals] + [t - t // 2 for t in totals]
    pads = _pairs(concrete(op, "padding", padding), n)
    return pads + pads


@export_rule("conv1d", "conv2d", "conv3d")
def _conv(b, op, a, out):
    kernel = list(concrete(op, "kernel size", a.weight.meta.shape[2:]))
    n = len(kernel)
    dilation = _pairs(a.dilation, n)
    bias = a.bias.name if isinstance(a.bias, Value) else None
    return b.op("Conv", a.input.name, a.weight.name, bias, kernel_shape=kernel, strides=_pairs(a.stride, n),
                pads=_conv_pads(op, a.padding, kernel, dilation), dilations=dilation, group=int(a.groups))


@export_rule("conv_transpose2d")
def _conv_transpose(b, op, a, out):
    kernel = list(concrete(op, "kernel size", a.weight.meta.shape[2:]))
    padding = _pairs(a.padding, 2)
    bias = a.bias.name if isinstance(a.bias, Value) else None
    return b.op("ConvTranspose", a.input.name, a.weight.name, bias, kernel_shape=kernel,
                strides=_pairs(a.stride, 2), pads=padding + padding, dilations=_pairs(a.dilation, 2),
                output_padding=_pairs(a.output_padding, 2), group=int(a.groups))


def _pool_window(a, n):
    """Kernel, strides and ONNX pads of an ``n``-D pool."""
    kernel = _pairs(a.kernel_size, n)
    given = a.stride is not None and not (isinstance(a.stride, (tuple, list)) and not a.stride)
    stride = _pairs(a.stride, n) if given else kernel
    padding = _pairs(a.padding, n)
    return kernel, stride, padding + padding


def _pool_dims(op):
    """The spatial dims of a pool op, from its name's ``1d``/``2d``/``3d``."""
    return int(op.name[-2])


@export_rule("max_pool1d", "max_pool2d", "max_pool3d")
def _max_pool(b, op, a, out):
    if a.return_indices:
        raise unsupported(op, "return_indices=True", "pool without indices for export")
    n = _pool_dims(op)
    kernel, stride, pads = _pool_window(a, n)
    return b.op("MaxPool", a.input.name, kernel_shape=kernel, strides=stride, pads=pads,
                dilations=_pairs(a.dilation, n), ceil_mode=int(a.ceil_mode))


@export_rule("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _avg_pool(b, op, a, out):
    if getattr(a, "divisor_override", None) is not None:
        raise unsupported(op, f"divisor_override={a.divisor_override}")
    kernel, stride, pads = _pool_window(a, _pool_dims(op))
    return b.op("AveragePool", a.input.name, kernel_shape=kernel, strides=stride, pads=pads,
                ceil_mode=int(a.ceil_mode), count_include_pad=int(a.count_include_pad))


# -- normalisation ---------------------------------------------------------------------------
@export_rule("batch_norm")
def _batch_norm(b, op, a, out):
    if a.training or a.running_mean is None:
        raise unsupported(op, "batch statistics (training mode)",
                          "call model.eval() before exporting: export uses the running statistics")
    channels = a.input.meta.shape[1]
    scale = a.weight.name if isinstance(a.weight, Value) else b.const([1.0] * channels, out.dtype)
    shift = a.bias.name if isinstance(a.bias, Value) else b.const([0.0] * channels, out.dtype)
    return b.op("BatchNormalization", a.input.name, scale, shift, a.running_mean.name, a.running_var.name,
                epsilon=float(a.eps))


@export_rule("layer_norm")
def _layer_norm(b, op, a, out):
    shape = list(concrete(op, "normalized shape", tuple(_pairs(a.normalized_shape, 1))))
    scale = a.weight.name if isinstance(a.weight, Value) else b.const(np.ones(shape), out.dtype)
    bias = a.bias.name if isinstance(a.bias, Value) else None
    return b.op("LayerNormalization", a.input.name, scale, bias, axis=-len(shape), epsilon=float(a.eps))


@export_rule("group_norm")
def _group_norm(b, op, a, out):
    x = a.input.name
    grouped = b.op("Reshape", x, b.ints([0, a.num_groups, -1]))
    mean = b.reduce("ReduceMean", grouped, [2], True)
    centered = b.op("Sub", grouped, mean)
    var = b.reduce("ReduceMean", b.op("Mul", centered, centered), [2], True)
    normed = b.op("Div", centered, b.op("Sqrt", b.op("Add", var, b.scalar(a.eps, out.dtype))))
    y = b.op("Reshape", normed, b.op("Shape", x))
    affine = b.ints([-1] + [1] * (len(out.shape) - 2))
    if isinstance(a.weight, Value):
        y = b.op("Mul", y, b.op("Reshape", a.weight.name, affine))
    if isinstance(a.bias, Value):
        y = b.op("Add", y, b.op("Reshape", a.bias.name, affine))
    return y


@export_rule("instance_norm")
def _instance_norm(b, op, a, out):
    channels = a.input.meta.shape[1]
    scale = a.weight.name if isinstance(a.weight, Value) else b.const([1.0] * concrete(op, "channels", channels),
                                                                        out.dtype)
    shift = a.bias.name if isinstance(a.bias, Value) else b.const([0.0] * channels, out.dtype)
    if a.use_input_stats:
        return b.op("InstanceNormalization", a.input.name, scale, shift, epsilon=float(a.eps))
    # normalised by the running statistics: what BatchNormalization computes at inference
    return b.op("BatchNormalization", a.input.name, scale, shift, a.running_mean.name, a.running_var.name,
                epsilon=float(a.eps))


@export_rule("rms_norm")
def _rms_norm(b, op, a, out):
    rank = len(out.shape)
    k = len(_pairs(a.normalized_shape, 1))
    x = a.input.name
    eps = a.eps if a.eps is not None else float(np.finfo(np.float64 if out.dtype is _dt.float64 else np.float32).eps)
    mean_square = b.reduce("ReduceMean", b.op("Mul", x, x), list(range(rank - k, rank)), True)
    y = b.op("Mul", x, b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean_square, b.scalar(eps, out.dtype)))))
    return b.op("Mul", y, a.weight.name) if isinstance(a.weight, Value) else y


# -- softmax and reductions ------------------------------------------------------------------
@export_rule("softmax", "log_softmax")
def _softmax(b, op, a, out):
    if a.dim is None:
        raise unsupported(op, "an implicit dim", f"call {op.name}(x, dim=...) with an explicit dim")
    x = b.cast(a.input, out.dtype)
    return b.op("Softmax" if op.name == "softmax" else "LogSoftmax", x, axis=axis(a.dim, len(out.shape)))


_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "prod": "ReduceProd", "amax": "ReduceMax",
           "amin": "ReduceMin", "logsumexp": "ReduceLogSumExp"}


@export_rule(*_REDUCE)
def _reduce(b, op, a, out):
    x = b.cast(a.input, out.dtype)
    return b.reduce(_REDUCE[op.name], x, _axes(a.dim, len(a.input.meta.shape)), a.keepdim)


@export_rule("max", "min")
def _max_min(b, op, a, out):
    if a.other is not None:
        return b.op("Max" if op.name == "max" else "Min", *operands(b, op, out, a.input, a.other))
    reduce_type = "ReduceMax" if op.name == "max" else "ReduceMin"
    if a.dim is None:
        return b.reduce(reduce_type, a.input.name, None, False)
    dim = axis(a.dim, len(a.input.meta.shape))
    values = b.reduce(reduce_type, a.input.name, [dim], a.keepdim)
    indices = b.op("ArgMax" if op.name == "max" else "ArgMin", a.input.name, axis=dim, keepdims=int(bool(a.keepdim)))
    return values, indices


@export_rule("argmax", "argmin")
def _argmax(b, op, a, out):
    op_type = "ArgMax" if op.name == "argmax" else "ArgMin"
    if a.dim is not None:
        return b.op(op_type, a.input.name, axis=axis(a.dim, len(a.input.meta.shape)), keepdims=int(bool(a.keepdim)))
    flat = b.op(op_type, b.op("Reshape", a.input.name, b.ints([-1])), axis=0, keepdims=0)
    return b.op("Reshape", flat, b.ints(out.shape)) if out.shape else flat


@export_rule("all", "any")
def _all_any(b, op, a, out):
    ints = b.op("Cast", a.input.name, to=6)  # INT32: ReduceMin/Max take no bool before opset 20
    axes = _axes(a.dim, len(a.input.meta.shape))
    reduced = b.reduce("ReduceMin" if op.name == "all" else "ReduceMax", ints, axes, a.keepdim)
    return b.op("Cast", reduced, to=9)  # BOOL


@export_rule("cumsum")
def _cumsum(b, op, a, out):
    return b.op("CumSum", b.cast(a.input, out.dtype), b.scalar(axis(a.dim, len(out.shape)), _dt.int64))


def _top_k(b, op, x, k, dim, largest):
    """``TopK``: its ties come lower index first, the stable order fxkit's sorts give."""
    rank = len(x.meta.shape)
    return b.op("TopK", x.name, b.ints([k]), axis=axis(dim, rank), largest=int(bool(largest)), sorted=1, outputs=2)


@export_rule("topk")
def _topk(b, op, a, out):
    return tuple(_top_k(b, op, a.input, a.k, a.dim, a.largest))


@export_rule("sort", "argsort")
def _sort(b, op, a, out):
    shape = a.input.meta.shape
    size = shape[axis(a.dim, len(shape))] if shape else 1
    values, indices = _top_k(b, op, a.input, size, a.dim, a.descending)
    return (values, indices) if op.name == "sort" else indices


@export_rule("var", "std")
def _var_std(b, op, a, out):
    rank = len(a.input.meta.shape)
    axes = _axes(a.dim, rank)
    correction = a.correction if a.correction is not None else (0 if a.unbiased is False else 1)
    x = b.cast(a.input, out.dtype)
    centered = b.op("Sub", x, b.reduce("ReduceMean", x, axes, True))
    total = b.reduce("ReduceSum", b.op("Mul", centered, centered), axes, a.keepdim)
    count = math.prod(a.input.meta.shape[i] for i in axes) - correction
    var = b.op("Div", total, b.dim_scalar(count, out.dtype))
    return b.op("Sqrt", var) if op.name == "std" else var


@export_rule("var_mean", "std_mean")
def _moments(b, op, a, out):
    """``var``/``std``'s rule, and the mean over the same axes."""
    spread = _var_std(b, get_op(op.name[:3]), a, out[0])
    mean = b.reduce("ReduceMean", b.cast(a.input, out[1].dtype), _axes(a.dim, len(a.input.meta.shape)), a.keepdim)
    return spread, mean


@export_rule("glu")
def _glu(b, op, a, out):
    """The first half of ``input`` along ``dim`` times the sigmoid of the second."""
    dim = axis(a.dim, len(a.input.meta.shape))
    half = a.input.meta.shape[dim] // 2
    first, second = b.op("Split", a.input.name, b.ints([half, half]), axis=dim, outputs=2)
    return b.op("Mul", first, b.op("Sigmoid", second))


@export_rule("pixel_shuffle", "pixel_unshuffle")
def _pixel_shuffle(b, op, a, out):
    """pixel_shuffle is DepthToSpace in ``CRD`` mode; pixel_unshuffle (not SpaceToDepth, whose
    channels are block-major) is a reshape, a transpose and a reshape."""
    shape = a.input.meta.shape
    if len(shape) != 4:
        raise unsupported(op, f"a {len(shape)}-D input", "reshape to (N, C, H, W) around it")
    if op.name == "pixel_shuffle":
        return b.op("DepthToSpace", a.input.name, blocksize=int(a.upscale_factor), mode="CRD")
    r = int(a.downscale_factor)
    _, c, h, w = shape
    split = b.op("Reshape", a.input.name, b.ints([0, c, h // r, r, w // r, r]))
    moved = b.op("Transpose", split, perm=[0, 1, 3, 5, 2, 4])
    return b.op("Reshape", moved, b.ints([0, c * r * r, h // r, w // r]))


@export_rule("norm")
def _norm(b, op, a, out):
    axes = _axes(a.dim, len(a.input.meta.shape))
    x = b.cast(a.input, out.dtype)
    if a.p in ("fro", 2, 2.0):
        return b.reduce("ReduceL2", x, axes, a.keepdim)
    if a.p in (1, 1.0):
        return b.reduce("ReduceL1", x, axes, a.keepdim)
    if a.p == math.inf:
        return b.reduce("ReduceMax", b.op("Abs", x), axes, a.keepdim)
    raise unsupported(op, f"p={a.p!r}", "use p=1, 2, 'fro' or inf")


# -- embedding and dropout -------------------------------------------------------------------
@export_rule("embedding")
def _embedding(b, op, a, out):
    if a.max_norm is not None:
        raise unsupported(op, "max_norm (it renormalises the weight while running)")
    return b.op("Gather", a.weight.name, a.input.name, axis=0)


@export_rule("dropout", "dropout2d")
def _dropout(b, op, a, out):
    if a.training and a.p > 0:
        raise unsupported(op, "training=True (random)",
                          "call model.eval() before tracing, or run fxkit.transforms.remove_dropout")
    return a.input.name


@module_rule(nn.Dropout, nn.Dropout2d, nn.Identity)
def _identity_layer(b, module, qualname, args, kwargs, out):
    """Layers that are the identity at inference export as their input, without tracing."""
    return (args[0] if args else next(iter(kwargs.values()))).name
