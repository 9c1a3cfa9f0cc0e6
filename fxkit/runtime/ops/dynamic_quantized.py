"""A linear layer with dynamically quantized activations: float in, int8 weights, int32 accumulation, float out.

This is what ``torch.ao.quantization.quantize_dynamic`` makes of ``nn.Linear``
and what ONNX writes as ``DynamicQuantizeLinear`` + ``MatMulInteger``: the
weights are quantized once, ahead of time (symmetric int8, per output feature
or per tensor, so their zero point is 0); the activations are quantized on
every call from their own range, which suits transformers, whose activation
ranges vary too much between inputs for a calibrated static scale::

    scale = (max(x, 0) - min(x, 0)) / 255,  zp = round(-min(x, 0) / scale)
    x_q = clamp(round(x / scale) + zp, 0, 255)                         (uint8)
    acc = (x_q - zp) @ w_q.T                                            (int32)
    out = acc * (scale * w_scale) + bias                                (float)

The activation quantization follows ONNX's ``DynamicQuantizeLinear`` exactly
(the range always holds 0; rounding half to even), so an exported model
agrees with this op to float32 rounding.
"""
import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd.function import nondifferentiable
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.nn_checks import dims_differ, shown
from fxkit.runtime.ops.quantized_ops import MAX_REDUCTION

NAME = "quantized_dynamic_linear"


def _rule(input, weight, weight_scale, bias=None):
    if input.dtype not in (_dt.float32, _dt.float64):
        raise DTypeError(f"{NAME}: the input must be float32 or float64 (it is quantized per call), "
                         f"got {input.dtype.name}")
    if weight.dtype is not _dt.int8:
        raise DTypeError(f"{NAME}: the weight must be int8 (symmetric, zero point 0), got {weight.dtype.name}; "
                         f"quantize it with fxkit.transforms.quantize.quantize_dynamic")
    if len(input.shape) < 1 or len(weight.shape) != 2:
        raise ShapeError(f"{NAME}: expected an input (*, in_features) and a weight (out_features, in_features), "
                         f"got shapes {shown(input.shape)} and {shown(weight.shape)}")
    if dims_differ(input.shape[-1], weight.shape[1]):
        raise ShapeError(f"{NAME}: the input's last dim {input.shape[-1]} does not match the weight's "
                         f"in_features {weight.shape[1]} (weight {shown(weight.shape)})")
    if isinstance(weight.shape[1], int) and weight.shape[1] > MAX_REDUCTION:
        raise ShapeError(f"{NAME}: in_features {weight.shape[1]} could overflow the int32 accumulator "
                         f"(at most {MAX_REDUCTION}); keep this layer in float")
    out_features = weight.shape[0]
    if weight_scale.dtype is not _dt.float32 or len(weight_scale.shape) > 1 or (
            len(weight_scale.shape) == 1 and dims_differ(weight_scale.shape[0], out_features)):
        raise ShapeError(f"{NAME}: weight_scale must be a float32 scalar or one per output feature "
                         f"({out_features}), got {weight_scale.dtype.name} of shape {shown(weight_scale.shape)}")
    if bias is not None and (len(bias.shape) != 1 or dims_differ(bias.shape[0], out_features)):
        raise ShapeError(f"{NAME}: bias must have shape ({out_features},), got {shown(bias.shape)}")
    return TensorMeta((*input.shape[:-1], out_features), input.dtype, input.device)


def dynamic_qparams(xp, x):
    """ONNX DynamicQuantizeLinear's uint8 scale (float32) and zero point (int32) of ``x``'s range."""
    low = min(float(x.min()), 0.0) if x.size else 0.0
    high = max(float(x.max()), 0.0) if x.size else 0.0
    scale = np.float32((np.float32(high) - np.float32(low)) / np.float32(255))
    if scale == 0:  # an all-zero input: any scale quantizes it exactly
        scale = np.float32(1)
    zero_point = int(np.clip(np.rint(np.float32(-low) / scale), 0, 255))
    return scale, zero_point


@op(NAME, kind="matmul", shape_rule=_rule, method=False)
def quantized_dynamic_linear(xp, input, weight, weight_scale, bias=None):
    """``input @ weight.T * scales + bias`` with ``input`` quantized to uint8 from its range on this call.

    Args:
        input: ``(*, in_features)`` float32 or float64.
        weight: ``(out_features, in_features)`` int8, symmetric (zero point 0).
        weight_scale: float32, a scalar (per tensor) or ``(out_features,)`` (per channel).
        bias: ``(out_features,)`` float, or None.

    Returns:
        ``(*, out_features)`` in the input's dtype.
    """
    x = input.reshape(-1, input.shape[-1])
    scale, zero_point = dynamic_qparams(xp, x)
    quantized = xp.clip(xp.rint(x.astype(np.float32) / scale) + zero_point, 0, 255).astype(np.int32)
    acc = xp.matmul(quantized - np.int32(zero_point), weight.astype(np.int32).T)
    out = acc.astype(np.float32) * (scale * weight_scale.astype(np.float32))
    if bias is not None:
        out = out + bias.astype(np.float32)
    return out.astype(input.dtype).reshape(*input.shape[:-1], weight.shape[0])


nondifferentiable("its activations are rounded to integers on every call; train the float model, then "
                  "quantize it with fxkit.transforms.quantize.quantize_dynamic", NAME)
