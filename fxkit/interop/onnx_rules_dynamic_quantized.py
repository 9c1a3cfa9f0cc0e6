"""ONNX export of ``quantized_dynamic_linear``: ``DynamicQuantizeLinear`` + ``MatMulInteger``.

This is the form onnxruntime's own ``quantize_dynamic`` writes and runs with
integer kernels::

    x_u8, x_scale, x_zp = DynamicQuantizeLinear(x)
    acc = MatMulInteger(x_u8, W_int8^T, x_zp)          (int32; the weight's zero point is 0)
    y = Cast(acc, float) * (x_scale * w_scale) + bias

The op quantizes its input exactly as ``DynamicQuantizeLinear`` does, so the
exported model agrees with fxkit to float32 rounding.
"""
from fxkit.interop.onnx_builder import Value, onnx_dtype
from fxkit.interop.onnx_rules import export_rule
from fxkit.runtime import dtypes as _dt


@export_rule("quantized_dynamic_linear")
def _dynamic_linear(b, op, a, out):
    x = b.cast(a.input, _dt.float32)
    quantized, scale, zero_point = b.op("DynamicQuantizeLinear", x, outputs=3)
    weight_t = b.op("Transpose", a.weight.name, perm=[1, 0])
    acc = b.op("MatMulInteger", quantized, weight_t, zero_point)
    factor = b.op("Mul", scale, b.cast(a.weight_scale, _dt.float32))
    y = b.op("Mul", b.op("Cast", acc, to=onnx_dtype(_dt.float32)), factor)
    if isinstance(a.bias, Value):
        y = b.op("Add", y, b.cast(a.bias, _dt.float32))
    return y if out.dtype is _dt.float32 else b.op("Cast", y, to=onnx_dtype(out.dtype))
