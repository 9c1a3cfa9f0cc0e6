"""ONNX export rules of quantized graphs, in the QDQ format.

A graph from ``fxkit.transforms.quantize.convert`` computes on integers with
``quantize_affine``/``dequantize_affine`` and the integer kernels
``quantized_linear``/``quantized_conv2d``. ONNX runtimes take quantized
models as float ops between ``QuantizeLinear``/``DequantizeLinear`` pairs
(QDQ) and fuse those into integer kernels themselves, so each kernel is
written as::

    DequantizeLinear(x), DequantizeLinear(w_int8), DequantizeLinear(bias_int32)
      -> Gemm / Conv (-> Relu) -> QuantizeLinear(y)

A kernel that writes float32 (``dtype=fxkit.float32``: its accumulator
dequantized, `convert`'s ``float_outputs``) has no ``QuantizeLinear``: the float
``Conv``/``Gemm`` output is the value; its factor encodes ``in_scale * w_scale``.

The kernel's arguments hold the input and output zero points and the
fixed-point factor ``in_scale * w_scale / out_scale``; the scales come from
``meta["qparams"]`` of the kernel's node and its input's (set by ``convert``),
which gives the weight scale back (to 1e-9 relative, the factor's precision).
ONNX rounds ``x / scale`` before adding the zero point where fxkit (like
PyTorch) adds it first, so a value on a rounding tie may differ by one step.
"""
import numpy as np

from fxkit.interop.onnx_builder import Value
from fxkit.interop.onnx_rules import OP_RULES, Args, export_rule, unsupported
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op


def _array(value):
    """A kernel argument (a number, or a `Value` of a buffer) as a numpy array."""
    if isinstance(value, Value):
        if value.data is None:
            raise unsupported(get_op("quantized_linear"), "quantization parameters computed in the graph")
        return value.data.cpu().numpy()
    return np.asarray(value)


def _qparams_input(b, dtype, scale, zero_point):
    """Scale (float32) and zero point (``dtype``) inputs of a Q/DQ node from numbers or `Value`s."""
    scale_name = b.cast(scale, _dt.float32) if isinstance(scale, Value) else b.scalar(scale, _dt.float32)
    zero_name = (b.cast(zero_point, dtype) if isinstance(zero_point, Value)
                 else b.const(np.asarray(zero_point), dtype))
    return scale_name, zero_name


@export_rule("quantize_affine")
def _quantize(b, op, a, out):
    scale, zero = _qparams_input(b, out.dtype, a.scale, a.zero_point)
    return b.op("QuantizeLinear", b.cast(a.input, _dt.float32), scale, zero, axis=a.axis)


@export_rule("dequantize_affine")
def _dequantize(b, op, a, out):
    scale, zero = _qparams_input(b, a.input.meta.dtype, a.scale, a.zero_point)
    return b.op("DequantizeLinear", a.input.name, scale, zero, axis=a.axis)


@export_rule("quantized_linear", "quantized_conv2d")
def _quantized_kernel(b, op, a, out):
    writes_float = out.dtype is _dt.float32
    qin, qout = a.input.qparams, b.meta.get("qparams")
    if qin is None or (qout is None and not writes_float):
        raise unsupported(op, "a kernel whose input or output scale is unknown (no meta['qparams'])",
                          "export the GraphModule fxkit.transforms.quantize.convert returned, unedited")
    real = _array(a.multiplier).astype(np.float64) * 2.0 ** (_array(a.shift).astype(np.float64) - 31)
    w_scale = real * (1.0 if writes_float else qout.scale) / qin.scale
    per_channel = w_scale.ndim == 1
    axis = 0 if per_channel else None
    x = b.op("DequantizeLinear", a.input.name, b.scalar(qin.scale, _dt.float32),
             b.scalar(qin.zero_point, qin.dtype))
    w_dtype = a.weight.meta.dtype
    w_zero = _array(a.weight_zero_point).astype(w_dtype.np)
    if per_channel and w_zero.ndim == 0:
        w_zero = np.full(w_scale.shape, w_zero, dtype=w_dtype.np)
    weight = b.op("DequantizeLinear", a.weight.name, b.const(w_scale, _dt.float32), b.const(w_zero, w_dtype),
                  axis=axis)
    bias = None
    if isinstance(a.bias, Value):
        bias_scale = b.const(qin.scale * w_scale, _dt.float32)
        bias = b.op("DequantizeLinear", a.bias.name, bias_scale, b.const(np.zeros_like(w_zero, np.int32), _dt.int32),
                    axis=axis)
    float_out = TensorMeta(out.shape, _dt.float32, out.device)
    operands = {"input": Value(x, TensorMeta(a.input.meta.shape, _dt.float32, out.device)),
                "weight": Value(weight, TensorMeta(a.weight.meta.shape, _dt.float32, out.device)),
                "bias": None if bias is None else Value(bias, TensorMeta(a.bias.meta.shape, _dt.float32, out.device))}
    if op.name == "quantized_linear":
        float_op = get_op("linear")
        arguments = Args({"input": operands["input"], "weight": operands["weight"], "bias": operands["bias"]})
    else:
        float_op = get_op("conv2d")
        arguments = Args({**operands, "stride": a.stride, "padding": a.padding, "dilation": a.dilation,
                          "groups": a.groups})
    y = OP_RULES[float_op](b, float_op, arguments, float_out)
    if a.relu:
        y = b.op("Relu", y)
    if writes_float:
        return y
    return b.op("QuantizeLinear", y, b.scalar(qout.scale, _dt.float32), b.scalar(qout.zero_point, out.dtype))
