"""The ONNX import table: ONNX op type -> rule building registry op calls.

A rule takes a `NodeCall` (``c.tensor(i)``, ``c.ints(i)``, ``c.attr(name)``,
``c.call(op_name, ...)``) and returns the node's result (a list for several
outputs). Shape arithmetic (``Shape``, ``Gather``/``Concat``/``Mul`` on
shapes) stays `Dims`, Python values, so shapes computed in the file still
reach ``Reshape`` and ``Expand`` as shapes.
"""
import numpy as np

from fxkit.errors import GraphError
from fxkit.interop.onnx_import_values import Const, Dims
from fxkit.interop.onnx_import_dims import REDUCIBLE, itemwise, reduce_items, wants_itemwise
from fxkit.runtime import dtypes as _dt

IMPORT_RULES = {}


def import_rule(*op_types):
    """Register the decorated function as the import rule of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            IMPORT_RULES[op_type] = fn
        return fn
    return register


def refuse(c, what):
    """The error of a node using a feature fxkit does not import (the caller names the node)."""
    return GraphError(f"{what} is not supported by fxkit.from_onnx")


def fxkit_dtype(onnx_type):
    """The fxkit dtype of an ONNX ``TensorProto`` element type."""
    import onnx

    return _dt.from_numpy(onnx.helper.tensor_dtype_to_np_dtype(onnx_type))


# -- elementwise ---------------------------------------------------------------------------
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Pow": "pow", "Equal": "eq", "Less": "lt",
           "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
_UNARY = {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Sin": "sin", "Cos": "cos",
          "Tanh": "tanh", "Erf": "erf", "Reciprocal": "reciprocal", "Sigmoid": "sigmoid", "Relu": "relu",
          "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Not": "logical_not", "IsNaN": "isnan",
          "BitwiseNot": "bitwise_not"}
@import_rule(*_BINARY, "Div")
def _binary(c):
    if wants_itemwise(c, c.op_type):
        return itemwise(c, c.op_type, [c.value(0), c.value(1)])
    x, y = c.tensor(0), c.tensor(1)
    if c.op_type == "Div":
        dtype = c.dtype(0)
        if dtype is not None and not dtype.is_floating_point:
            return c.call("div", x, y, rounding_mode="trunc")  # ONNX's integer division truncates
        return c.call("div", x, y)
    return c.call(_BINARY[c.op_type], x, y)


@import_rule(*_UNARY)
def _unary(c):
    if wants_itemwise(c, c.op_type):
        return itemwise(c, c.op_type, [c.value(0)])
    return c.call(_UNARY[c.op_type], c.tensor(0))


@import_rule("IsInf")
def _is_inf(c):
    """``isinf``, narrowed to one sign when ``detect_negative`` or ``detect_positive`` is 0."""
    x = c.tensor(0)
    found = c.call("isinf", x)
    if not c.attr("detect_negative", 1):
        found = c.call("logical_and", found, c.call("gt", x, 0))
    if not c.attr("detect_positive", 1):
        found = c.call("logical_and", found, c.call("lt", x, 0))
    return found


@import_rule("Max", "Min")
def _max_min(c):
    if wants_itemwise(c, c.op_type):
        result = c.value(0)
        for i in range(1, c.n_inputs):
            result = itemwise(c, c.op_type, [result, c.value(i)])
        return result
    result = c.tensor(0)
    for i in range(1, c.n_inputs):
        result = c.call("maximum" if c.op_type == "Max" else "minimum", result, c.tensor(i))
    return result


@import_rule("Mod")
def _mod(c):
    if c.attr("fmod", 0):
        raise refuse(c, "Mod with fmod=1 (C's remainder sign)")
    if wants_itemwise(c, c.op_type):
        return itemwise(c, c.op_type, [c.value(0), c.value(1)])
    return c.call("remainder", c.tensor(0), c.tensor(1))


@import_rule("Where")
def _where(c):
    if wants_itemwise(c, c.op_type):
        return itemwise(c, c.op_type, [c.value(0), c.value(1), c.value(2)])
    return c.call("where", c.tensor(0), c.tensor(1), c.tensor(2))


@import_rule("Clip")
def _clip(c):
    bounds = []
    for i in (1, 2):
        value = c.value(i)
        bounds.append(None if value is None else (c.scalar(i) if isinstance(value, (Const, Dims)) else c.tensor(i)))
    return c.call("clamp", c.tensor(0), min=bounds[0], max=bounds[1])


@import_rule("LeakyRelu")
def _leaky_relu(c):
    return c.call("leaky_relu", c.tensor(0), float(c.attr("alpha", 0.01)))


@import_rule("Gelu")
def _gelu(c):
    return c.call("gelu", c.tensor(0), approximate=c.attr("approximate", "none"))


@import_rule("Softmax", "LogSoftmax")
def _softmax(c):
    if c.opset < 13:
        raise refuse(c, f"{c.op_type} before opset 13 (it flattened the input)")
    return c.call("softmax" if c.op_type == "Softmax" else "log_softmax", c.tensor(0), c.attr("axis", -1))


@import_rule("Identity", "Dropout")
def _identity(c):
    if c.op_type == "Dropout" and c.value(2) is not None and c.scalar(2):
        raise refuse(c, "Dropout in training mode")
    return c.value(0)


@import_rule("Cast")
def _cast(c):
    dtype = fxkit_dtype(c.attr("to"))
    value = c.value(0)
    if isinstance(value, Dims) and dtype.np.kind in "iu" and all(type(d) is not bool for d in value):
        return value  # shape values are int64 whichever integer type they are cast to
    if isinstance(value, Dims) and value.known:
        return c.const_value(value.array().astype(dtype.np))
    if isinstance(value, Const):
        return c.const_value(value.array.astype(dtype.np))
    return c.call("to", c.tensor(0), dtype=dtype)


# -- matmul, conv, pooling, normalisation --------------------------------------------------------
@import_rule("MatMul")
def _matmul(c):
    return c.call("matmul", c.tensor(0), c.tensor(1))


@import_rule("Gemm")
def _gemm(c):
    a, b = c.tensor(0), c.tensor(1)
    alpha, beta = c.attr("alpha", 1.0), c.attr("beta", 1.0)
    bias = c.tensor(2)
    if c.attr("transA", 0):
        a = c.call("t", a)
    if c.attr("transB", 0) and alpha == 1.0 and (bias is None or beta == 1.0):
        return c.call("linear", a, b, bias)  # the layout of a Linear layer: weight (out, in)
    if c.attr("transB", 0):
        b = c.call("t", b)
    y = c.call("matmul", a, b)
    if alpha != 1.0:
        y = c.call("mul", y, alpha)
    if bias is not None and beta != 0.0:
        y = c.call("add", y, bias if beta == 1.0 else c.call("mul", bias, beta))
    return y


@import_rule("Einsum")
def _einsum(c):
    return c.call("einsum", c.attr("equation"), *(c.tensor(i) for i in range(c.n_inputs)))


def _symmetric_pads(c, n):
    """The per-dim padding of ``pads`` (begin == end), or an explicit ``pad`` when not."""
    auto = c.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * n, None
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        raise refuse(c, f"auto_pad={auto}; re-export with explicit pads")
    pads = list(c.attr("pads", [0] * (2 * n)))
    begins, ends = pads[:n], pads[n:]
    if begins == ends:
        return begins, None
    torch_pads = []
    for b, e in zip(reversed(begins), reversed(ends)):
        torch_pads += [b, e]
    return [0] * n, torch_pads


@import_rule("Conv")
def _conv(c):
    weight_shape = c.shape(1)
    n = len(weight_shape) - 2 if weight_shape else len(c.attr("kernel_shape", ()))
    if n not in (1, 2, 3):
        raise refuse(c, f"a {n}-D convolution")
    padding, explicit = _symmetric_pads(c, n)
    x = c.tensor(0)
    if explicit is not None:
        x = c.call("pad", x, explicit)
    return c.call(f"conv{n}d", x, c.tensor(1), c.tensor(2), tuple(c.attr("strides", [1] * n)),
                  tuple(padding), tuple(c.attr("dilations", [1] * n)), c.attr("group", 1))


@import_rule("ConvTranspose")
def _conv_transpose(c):
    if "output_shape" in c.attrs:
        raise refuse(c, "ConvTranspose with output_shape; re-export with pads and output_padding")
    padding, explicit = _symmetric_pads(c, 2)
    if explicit is not None:
        raise refuse(c, "ConvTranspose with asymmetric pads")
    return c.call("conv_transpose2d", c.tensor(0), c.tensor(1), c.tensor(2), tuple(c.attr("strides", [1, 1])),
                  tuple(padding), tuple(c.attr("output_padding", [0, 0])), c.attr("group", 1),
                  tuple(c.attr("dilations", [1, 1])))


@import_rule("MaxPool", "AveragePool")
def _pool(c):
    kernel = list(c.attr("kernel_shape"))
    n = len(kernel)
    if n not in (1, 2, 3):
        raise refuse(c, f"{n}-D pooling")
    if len(c.proto.output) > 1 and c.proto.output[1]:
        raise refuse(c, "MaxPool's Indices output")
    padding, explicit = _symmetric_pads(c, n)
    if explicit is not None:
        raise refuse(c, "pooling with asymmetric pads")
    strides = tuple(c.attr("strides", [1] * n))
    ceil = bool(c.attr("ceil_mode", 0))
    if c.op_type == "MaxPool":
        return c.call(f"max_pool{n}d", c.tensor(0), tuple(kernel), strides, tuple(padding),
                      tuple(c.attr("dilations", [1] * n)), ceil_mode=ceil)
    return c.call(f"avg_pool{n}d", c.tensor(0), tuple(kernel), strides, tuple(padding), ceil_mode=ceil,
                  count_include_pad=bool(c.attr("count_include_pad", 0)))


@import_rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c):
    dims = tuple(range(2, c.rank(0)))
    op_name = "mean" if c.op_type == "GlobalAveragePool" else "amax"
    return c.call(op_name, c.tensor(0), dims, keepdim=True)


@import_rule("BatchNormalization")
def _batch_norm(c):
    if c.attr("training_mode", 0) or any(c.proto.output[1:]):
        raise refuse(c, "BatchNormalization in training mode")
    return c.call("batch_norm", c.tensor(0), c.tensor(3), c.tensor(4), c.tensor(1), c.tensor(2), False, 0.1,
                  float(c.attr("epsilon", 1e-5)))


@import_rule("LayerNormalization")
def _layer_norm(c):
    if any(c.proto.output[1:]):
        raise refuse(c, "LayerNormalization's Mean and InvStdDev outputs")
    axis = c.attr("axis", -1)
    shape = c.shape(0)
    if shape is None or any(d is None for d in shape[axis:]):
        shape = c.shape(1)  # the scale has the normalized shape
        normalized = shape
    else:
        normalized = shape[axis:]
    if normalized is None or any(d is None for d in normalized):
        raise refuse(c, "LayerNormalization over dims of unknown size")
    return c.call("layer_norm", c.tensor(0), tuple(normalized), c.tensor(1), c.tensor(2),
                  float(c.attr("epsilon", 1e-5)))


# -- reductions ------------------------------------------------------------------------------
_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "amax", "ReduceMin": "amin",
           "ReduceProd": "prod", "ReduceL1": "norm", "ReduceL2": "norm", "ReduceLogSumExp": "logsumexp"}


@import_rule(*_REDUCE)
def _reduce(c):
    axes = c.attr("axes")
    if axes is None and c.value(1) is not None:
        axes = c.ints(1)
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return c.value(0)
        axes = list(range(c.rank(0)))
    keep = bool(c.attr("keepdims", 1))
    value = c.value(0)
    if (isinstance(value, Dims) and not value.scalar and value and c.op_type in REDUCIBLE
            and [a % 1 for a in axes] == [0]):
        return reduce_items(c, c.op_type, value, keep)
    op_name, x = _REDUCE[c.op_type], c.tensor(0)
    if op_name == "norm":
        return c.call("norm", x, 1 if c.op_type == "ReduceL1" else 2, tuple(axes), keep)
    if op_name == "prod":
        if len(axes) != 1:
            raise refuse(c, "ReduceProd over several axes")
        return c.call("prod", x, axes[0], keep)
    return c.call(op_name, x, tuple(axes), keep)


@import_rule("ArgMax", "ArgMin")
def _argmax(c):
    if c.attr("select_last_index", 0):
        raise refuse(c, "select_last_index=1")
    return c.call(c.op_type.lower(), c.tensor(0), c.attr("axis", 0), bool(c.attr("keepdims", 1)))


@import_rule("CumSum")
def _cumsum(c):
    if c.attr("exclusive", 0) or c.attr("reverse", 0):
        raise refuse(c, "CumSum with exclusive or reverse")
    return c.call("cumsum", c.tensor(0), int(c.scalar(1)))


@import_rule("Trilu")
def _trilu(c):
    k = c.scalar(1) if c.value(1) is not None else 0
    return c.call("triu" if c.attr("upper", 1) else "tril", c.tensor(0), int(k))


@import_rule("OneHot")
def _one_hot(c):
    if c.attr("axis", -1) != -1:
        raise refuse(c, "OneHot with an axis other than -1")
    values = c.const(2)
    hot = c.call("one_hot", c.call("long", c.tensor(0)), int(c.scalar(1)))
    if list(values) == [0, 1]:
        return c.call("to", hot, dtype=_dt.from_numpy(values.dtype))
    return c.call("add", c.call("mul", c.call("to", hot, dtype=_dt.from_numpy(values.dtype)),
                                values[1].item() - values[0].item()), values[0].item())


# -- QDQ quantization ----------------------------------------------------------------------------
def _qdq_params(c, rank_of):
    """Scale and zero point of a Q/DQ node as numbers (per tensor) or nodes (per axis), and the axis."""
    scale = np.asarray(c.const(1))
    zero = np.asarray(c.const(2)) if c.value(2) is not None else np.zeros(scale.shape, np.uint8)
    if scale.ndim == 0:
        return float(scale), int(zero), None, zero.dtype
    axis = c.attr("axis", 1)
    return c.tensor(1), c.tensor(2), axis + rank_of if axis < 0 else axis, zero.dtype


@import_rule("QuantizeLinear")
def _quantize_linear(c):
    scale, zero, axis, dtype = _qdq_params(c, c.rank(0))
    return c.call("quantize_affine", c.tensor(0), scale, zero, _dt.from_numpy(dtype), axis)


@import_rule("DequantizeLinear")
def _dequantize_linear(c):
    scale, zero, axis, dtype = _qdq_params(c, c.rank(0))
    if dtype in (np.int8, np.uint8):
        return c.call("dequantize_affine", c.tensor(0), scale, zero, axis)
    # int32 (a QDQ bias): the same arithmetic in float32, scale and zero point broadcast along axis
    if axis is not None:
        shape = [-1] + [1] * (c.rank(0) - axis - 1)
        scale, zero = c.call("reshape", scale, *shape), c.call("reshape", zero, *shape)
    values = c.call("sub", c.call("to", c.tensor(0), dtype=_dt.float32), zero)
    return c.call("mul", values, scale)
