"""Integer kernels of quantized linear layers and 2-D convolutions.

``quantized_linear`` and ``quantized_conv2d`` take int8/uint8 activations and
weights with their zero points, accumulate ``(x - x_zp) * (w - w_zp)`` (plus an
int32 bias) in int32, and requantize the accumulator to the output's int8/uint8
with a fixed-point multiplier, as gemmlowp and TFLite do::

    out = clamp(x_out_zp + rounding_doubling_high_mul(acc << left, multiplier) >> right, qmin, qmax)

``multiplier`` (an int32 in [2**30, 2**31)) and ``shift`` encode the real factor
``input_scale * weight_scale / output_scale`` (`quantize_multiplier`); per-channel
weights have one pair per output channel. ``relu=True`` raises the lower clamp
to the output zero point, which is ReLU in the quantized domain.

``dtype=fxkit.float32`` writes the accumulator dequantized instead, with no
rounding or clamp to an integer grid: the output is the real number
``(acc + bias) * input_scale * weight_scale``, i.e. the same arithmetic with an
output scale of 1 and zero point 0 (so ``multiplier``/``shift`` encode
``input_scale * weight_scale``), evaluated in float64 and rounded to float32.
`convert` uses it for a layer whose output only float ops read (a residual add,
the classifier's logits): requantizing such an output to int8 only to
dequantize it again adds a rounding step and gains nothing.

The array code here is the reference, on numpy or cupy. A faster CPU engine
(numba, from ``fxkit.backends``) registers itself with `register_quantized_engine`
and is chosen with `set_quantized_engine`, as ``torch.backends.quantized.engine``
chooses fbgemm or qnnpack; every engine gives bit-identical results.
"""
import contextlib

import numpy as np

from fxkit.errors import DTypeError, FxkitError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd.function import nondifferentiable
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.conv import check_rank, ntuple, pad2d, sliding_size
from fxkit.runtime.ops.nn_checks import dims_differ, dtype_of, shown
from fxkit.runtime.quantized import QUANT_DTYPES, quant_dtype, quant_range

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
# int32 accumulation cannot overflow while K * 255 * 255 (the largest |product| sum) fits.
MAX_REDUCTION = _INT32_MAX // (255 * 255)


# -- fixed-point requantization -----------------------------------------------------------------
def quantize_multiplier(real):
    """gemmlowp's ``QuantizeMultiplier``: each positive real as ``multiplier * 2**(shift - 31)``.

    Args:
        real: a positive number or an array of them (``in_scale * w_scale / out_scale``).

    Returns:
        ``(multiplier, shift)`` int32 arrays of ``real``'s shape, multiplier in
        [2**30, 2**31) (0 with shift 0 for reals below 2**-32).

    Example:
        >>> quantize_multiplier(0.75)
        (array(1610612736, dtype=int32), array(0, dtype=int32))
    """
    real = np.asarray(real, dtype=np.float64)
    if not (np.isfinite(real).all() and (real > 0).all()):
        raise ShapeError(f"quantize_multiplier: expected positive finite reals, got {real.ravel()[:8].tolist()}")
    mantissa, exponent = np.frexp(real)
    q = np.floor(mantissa * (1 << 31) + 0.5).astype(np.int64)  # std::round: halves away from zero
    carry = q == (1 << 31)
    q = np.where(carry, q // 2, q)
    exponent = np.where(carry, exponent + 1, exponent)
    tiny = exponent < -31
    q, exponent = np.where(tiny, 0, q), np.where(tiny, 0, exponent)
    if (exponent > 30).any():
        raise ShapeError(f"quantize_multiplier: factors up to 2**30 are supported, got {real.max()}; "
                         f"the output scale is far too small for the input and weight scales")
    return q.astype(np.int32), exponent.astype(np.int32)


def multiply_by_quantized_multiplier(xp, acc, multiplier, shift):
    """TFLite's ``MultiplyByQuantizedMultiplier`` on int32 accumulators, in int64 array arithmetic.

    ``SaturatingRoundingDoublingHighMul(acc * 2**left, multiplier)`` (the high 32 bits of the
    doubled product, rounded half away from zero) then ``RoundingDivideByPOT(., right)``
    (halves away from zero), where ``left = max(shift, 0)`` and ``right = max(-shift, 0)``.
    ``acc * 2**left`` saturates to int32 where gemmlowp's would overflow.
    """
    multiplier = xp.asarray(multiplier, dtype=np.int64)
    shift = xp.asarray(shift, dtype=np.int64)
    left = xp.maximum(shift, 0)
    right = xp.maximum(-shift, 0)
    x = xp.clip(acc.astype(np.int64) << left, _INT32_MIN, _INT32_MAX)
    product = x * multiplier
    product += xp.where(product >= 0, 1 << 30, 1 - (1 << 30))
    # C's division truncates toward zero; >> floors, so negative values go through their magnitude.
    high = xp.where(product >= 0, product >> 31, -((-product) >> 31))
    mask = (xp.ones_like(right) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def real_factor(xp, multiplier, shift):
    """The real number ``multiplier * 2**(shift - 31)`` (float64) that a fixed-point pair encodes."""
    return xp.asarray(multiplier, dtype=np.float64) * 2.0 ** (xp.asarray(shift, dtype=np.float64) - 31)


def requantize(xp, acc, multiplier, shift, output_zero_point, low, high, dtype):
    """``clamp(output_zero_point + multiply_by_quantized_multiplier(acc), low, high)`` as ``dtype``;
    for a float ``dtype``, ``clamp(acc * real_factor(multiplier, shift), low, high)`` (no rounding)."""
    if np.dtype(dtype).kind == "f":
        out = acc.astype(np.float64) * real_factor(xp, multiplier, shift)
        xp.clip(out, low, high, out=out)
        return out.astype(dtype)
    out = multiply_by_quantized_multiplier(xp, acc, multiplier, shift)
    out += output_zero_point
    xp.clip(out, low, high, out=out)
    return out.astype(dtype)


# -- quantized engines --------------------------------------------------------------------------
_ENGINES = {"reference": None}
_ACTIVE = {"name": "reference", "kernels": None}


def register_quantized_engine(name, loader):
    """Offer a CPU engine for the integer kernels.

    Args:
        name: the engine's name (``"numba"``).
        loader: ``loader() -> {"linear": fn, "conv2d": fn}``, called when the engine is
            first chosen (so a heavy library is imported only then). The functions take
            the normalised numpy arguments `reference_linear` and `reference_conv2d` take,
            without ``xp``, and must return bit-identical results.
    """
    _ENGINES[name] = loader


def quantized_engines():
    """The names of the registered engines (``"reference"`` always)."""
    return list(_ENGINES)


def quantized_engine():
    """The name of the engine the CPU integer kernels run on."""
    return _ACTIVE["name"]


def set_quantized_engine(name):
    """Run the CPU integer kernels on engine ``name``; returns the previous engine's name."""
    if name not in _ENGINES:
        raise FxkitError(f"set_quantized_engine: no engine named {name!r}; registered: {', '.join(_ENGINES)}"
                         + ("" if "numba" in _ENGINES else "; import fxkit.backends to register 'numba'"))
    loader = _ENGINES[name]
    kernels = None if loader is None else loader()
    previous = _ACTIVE["name"]
    _ACTIVE["name"], _ACTIVE["kernels"] = name, kernels
    return previous


@contextlib.contextmanager
def use_quantized_engine(name):
    """``with use_quantized_engine("numba"): ...`` runs the integer kernels on ``name`` inside."""
    previous = set_quantized_engine(name)
    try:
        yield
    finally:
        set_quantized_engine(previous)


def _kernel(xp, name):
    kernels = _ACTIVE["kernels"]
    return kernels[name] if kernels is not None and xp is np else None


# -- argument checks shared by the impls and the shape rules ------------------------------------
def output_dtype(dtype, name):
    """A kernel's output dtype: int8 or uint8 (requantized), or float32 (dequantized accumulators)."""
    try:
        if _dt.as_dtype(dtype) is _dt.float32:
            return _dt.float32
    except DTypeError:
        pass
    try:
        return quant_dtype(dtype, name)
    except DTypeError:
        raise DTypeError(f"{name}: output dtype {dtype!r} is not supported; use fxkit.int8 or fxkit.uint8 "
                         f"(requantized), or fxkit.float32 (the dequantized accumulator)") from None


def _check_operands(name, input, weight, bias, dtype):
    for what, value in (("input", input), ("weight", weight)):
        if dtype_of(value) not in QUANT_DTYPES:
            raise DTypeError(f"{name}: expected an int8 or uint8 {what} (quantized values), "
                             f"got {dtype_of(value).name}; quantize it first")
    if bias is not None and dtype_of(bias) is not _dt.int32:
        raise DTypeError(f"{name}: expected an int32 bias (quantized with scale input_scale * weight_scale), "
                         f"got {dtype_of(bias).name}")
    return output_dtype(dtype, name)


def _check_bias(name, bias, channels, w_shape):
    if bias is not None and (len(bias.shape) != 1 or dims_differ(bias.shape[0], channels)):
        raise ShapeError(f"{name}: weight of shape {shown(w_shape)} expects a bias of shape [{channels}], "
                         f"got {shown(bias.shape)}")


def _check_reduction(name, size):
    if isinstance(size, int) and size > MAX_REDUCTION:
        raise ShapeError(f"{name}: {size} products per output overflow the int32 accumulator "
                         f"(at most {MAX_REDUCTION}); split the layer")


def _channel_vector(xp, value, channels, name, what):
    """A per-tensor int or a per-channel vector as an int32 array of ``channels`` entries."""
    array = xp.asarray(value)
    if array.dtype.kind not in "iu":
        raise DTypeError(f"{name}: {what} must be integers, got {array.dtype}")
    if array.ndim == 0:
        return xp.full(channels, int(array), np.int32)
    if array.shape != (channels,):
        raise ShapeError(f"{name}: expected one {what} or {channels} (one per output channel), "
                         f"got shape {list(array.shape)}")
    return array.astype(np.int32, copy=False)


def _normalized(xp, name, channels, bias, weight_zero_point, multiplier, shift, output_zero_point, dtype, relu):
    """The per-channel int32 vectors and the output clamp every engine takes (float bounds for a
    float output: 0 or -inf below, +inf above)."""
    if dtype is _dt.float32:
        if output_zero_point != 0:
            raise ShapeError(f"{name}: a float32 output is the real value (scale 1, zero point 0), got "
                             f"output_zero_point {output_zero_point}; pass 0")
        qmin, qmax = -np.inf, np.inf
    else:
        qmin, qmax = quant_range(dtype)
    if not qmin <= output_zero_point <= qmax:
        raise ShapeError(f"{name}: output_zero_point {output_zero_point} is outside [{qmin}, {qmax}] of {dtype.name}")
    bias = xp.zeros(channels, np.int32) if bias is None else bias
    vectors = [_channel_vector(xp, v, channels, name, what) for v, what in
               ((weight_zero_point, "weight_zero_point"), (multiplier, "multiplier"), (shift, "shift"))]
    low = max(qmin, output_zero_point) if relu else qmin
    return (bias, *vectors, int(output_zero_point), float(low) if dtype is _dt.float32 else low, qmax)


# -- quantized_linear ------------------------------------------------------------------------------
def _linear_checks(input, weight, bias, dtype):
    """PyTorch's linear checks for integer operands; returns the output dtype."""
    name = "quantized_linear"
    dtype = _check_operands(name, input, weight, bias, dtype)
    if len(weight.shape) != 2 or len(input.shape) < 1:
        raise ShapeError(f"{name}: expected a 2-D weight (out_features, in_features) and an input of at least "
                         f"1 dimension, got {shown(weight.shape)} and {shown(input.shape)}")
    if dims_differ(input.shape[-1], weight.shape[1]):
        rows = "x".join(str(d) for d in input.shape[:-1]) or "1"
        raise ShapeError(f"{name}: input and weight shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                         f"{weight.shape[1]}x{weight.shape[0]})")
    _check_bias(name, bias, weight.shape[0], weight.shape)
    _check_reduction(name, input.shape[-1])
    return dtype


def _linear_rule(input, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point,
                 dtype=_dt.int8, relu=False):
    dtype = _linear_checks(input, weight, bias, dtype)
    return TensorMeta((*input.shape[:-1], weight.shape[0]), dtype, input.device)


def reference_linear(xp, x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                     output_zero_point, low, high, dtype):
    """The integer linear layer on 2-D ``x`` with normalised arguments (the reference engine)."""
    acc = xp.matmul(x.astype(np.int32) - np.int32(input_zero_point),
                    (weight.astype(np.int32) - weight_zero_point[:, None]).T)
    acc += bias
    return requantize(xp, acc, multiplier, shift, output_zero_point, low, high, dtype)


@op("quantized_linear", kind="matmul", shape_rule=_linear_rule, method=False)
def quantized_linear(xp, input, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                     output_zero_point, dtype=_dt.int8, relu=False):
    """A linear layer on quantized values: int32 accumulation, fixed-point requantization.

    Args:
        input: ``(*, in_features)`` int8 or uint8.
        weight: ``(out_features, in_features)`` int8 or uint8.
        bias: ``(out_features,)`` int32 (the float bias divided by input_scale * weight_scale), or None.
        input_zero_point: the input's zero point (an int).
        weight_zero_point: an int, or an int32 tensor with one per output feature.
        multiplier, shift: the fixed-point factor(s) from `quantize_multiplier`, an int each
            or int32 tensors with one per output feature.
        output_zero_point: the output's zero point.
        dtype: the output dtype: int8 or uint8, or float32 for the dequantized accumulator
            (then ``multiplier``/``shift`` encode ``input_scale * weight_scale`` and
            ``output_zero_point`` is 0).
        relu: clamp below at the output zero point (a fused ReLU).

    Returns:
        ``(*, out_features)`` values of ``dtype``.
    """
    name = "quantized_linear"
    dtype = _linear_checks(input, weight, bias, dtype)
    args = _normalized(xp, name, weight.shape[0], bias, weight_zero_point, multiplier, shift, output_zero_point,
                       dtype, relu)
    x = input.reshape(-1, input.shape[-1])
    kernel = _kernel(xp, "linear")
    if kernel is None:
        out = reference_linear(xp, x, weight, args[0], int(input_zero_point), *args[1:], dtype.np)
    else:
        out = kernel(x, weight, args[0], int(input_zero_point), *args[1:], dtype.np)
    return out.reshape(*input.shape[:-1], weight.shape[0])


# -- quantized_conv2d --------------------------------------------------------------------------------
def _conv_geometry(input, weight, bias, stride, padding, dilation, groups):
    """PyTorch's conv2d checks for integer operands; returns (batched, stride, padding, dilation, out_shape)."""
    name = "quantized_conv2d"
    batched = check_rank(name, input.shape, 4)
    x_shape = tuple(input.shape) if batched else (1,) + tuple(input.shape)
    if len(weight.shape) != 4:
        raise ShapeError(f"{name}: expected a 4-D weight (out_channels, in_channels/groups, kH, kW), "
                         f"got one of shape {shown(weight.shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{name}: groups must be a positive integer, got {groups!r}")
    out_channels = weight.shape[0]
    if isinstance(out_channels, int) and out_channels % groups:
        raise ShapeError(f"{name}: weight of shape {shown(weight.shape)} has {out_channels} output channels, "
                         f"which groups={groups} does not divide")
    if dims_differ(x_shape[1], weight.shape[1] * groups):
        raise ShapeError(f"{name}: weight of shape {shown(weight.shape)} expects {weight.shape[1] * groups} input "
                         f"channels (groups={groups}), got an input of shape {shown(input.shape)}")
    _check_bias(name, bias, out_channels, weight.shape)
    if isinstance(padding, str):
        raise ShapeError(f"{name}: padding must be an int or a pair, got {padding!r}; convert resolves "
                         f"'same' and 'valid' to numbers")
    stride, padding, dilation = (ntuple(v, 2, name, what) for v, what in
                                 ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    if any(isinstance(v, int) and v < 1 for v in stride + dilation) or any(p < 0 for p in padding):
        raise ShapeError(f"{name}: stride and dilation must be positive and padding non-negative, got "
                         f"stride={stride}, padding={padding}, dilation={dilation}")
    _check_reduction(name, weight.shape[1] * weight.shape[2] * weight.shape[3])
    out = []
    for size, p, k, s, d in zip(x_shape[2:], padding, weight.shape[2:], stride, dilation):
        span = d * (k - 1) + 1
        if isinstance(size, int) and span > size + 2 * p:
            raise ShapeError(f"{name}: the kernel {shown(weight.shape[2:])} is larger than the padded input of "
                             f"shape {shown(input.shape)} with padding {list(padding)}")
        out.append(sliding_size(size, 2 * p - span, s))
    out_shape = (x_shape[0], out_channels, *out)
    return batched, stride, padding, dilation, out_shape if batched else out_shape[1:]


def _conv_rule(input, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point,
               stride=1, padding=0, dilation=1, groups=1, dtype=_dt.int8, relu=False):
    dtype = _check_operands("quantized_conv2d", input, weight, bias, dtype)
    out_shape = _conv_geometry(input, weight, bias, stride, padding, dilation, groups)[-1]
    return TensorMeta(out_shape, dtype, input.device)


def reference_conv2d(xp, x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                     output_zero_point, low, high, dtype, stride, padding, dilation, groups):
    """The integer convolution of a batched ``(N, C, H, W)`` ``x`` (the reference engine):
    im2col over the zero-point-centred input, one int32 batched matmul, requantization."""
    centred = x.astype(np.int32) - np.int32(input_zero_point)
    ph, pw = padding
    if ph or pw:
        centred = pad2d(xp, centred, ph, ph, pw, pw)  # zero after centring: padding with the zero point
    n, c, h, w = centred.shape
    oc, cg, kh, kw = weight.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    g, k = groups, cg * kh * kw
    wmat = (weight.astype(np.int32) - weight_zero_point[:, None, None, None]).reshape(g, oc // g, k)
    s_n, s_c, s_h, s_w = centred.strides
    cols = xp.lib.stride_tricks.as_strided(
        centred, (g, cg, kh, kw, n, oh, ow), (cg * s_c, s_c, s_h * dh, s_w * dw, s_n, s_h * sh, s_w * sw))
    acc = xp.matmul(wmat, cols.reshape(g, k, n * oh * ow)).reshape(oc, n, oh, ow).transpose(1, 0, 2, 3)
    acc = acc + bias.reshape(oc, 1, 1)
    column = (oc, 1, 1)
    return requantize(xp, acc, multiplier.reshape(column), shift.reshape(column), output_zero_point, low, high,
                      dtype)


@op("quantized_conv2d", kind="conv", shape_rule=_conv_rule, method=False)
def quantized_conv2d(xp, input, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                     output_zero_point, stride=1, padding=0, dilation=1, groups=1, dtype=_dt.int8, relu=False):
    """A 2-D convolution on quantized values: int32 accumulation, fixed-point requantization.

    The input is padded with its zero point (the quantized 0.0). Arguments are those of
    `quantized_linear` (per-channel values are per output channel) and of ``conv2d``
    (``padding`` an int or a pair).

    Returns:
        ``(N, out_channels, OH, OW)`` values of ``dtype``.
    """
    name = "quantized_conv2d"
    dtype = _check_operands(name, input, weight, bias, dtype)
    batched, stride, padding, dilation, out_shape = _conv_geometry(input, weight, bias, stride, padding, dilation,
                                                                   groups)
    args = _normalized(xp, name, weight.shape[0], bias, weight_zero_point, multiplier, shift, output_zero_point,
                       dtype, relu)
    x = input if batched else input[None]
    kernel = _kernel(xp, "conv2d")
    if kernel is None:
        out = reference_conv2d(xp, x, weight, args[0], int(input_zero_point), *args[1:], dtype.np, stride, padding,
                               dilation, groups)
    else:
        out = kernel(x, weight, args[0], int(input_zero_point), *args[1:], dtype.np, stride, padding, dilation,
                     groups)
    return out.reshape(out_shape)


nondifferentiable("it computes on integer (quantized) values; quantization-aware training trains the float "
                  "model with fake quantization (fxkit.transforms.quantize.prepare_qat)",
                  "quantized_linear", "quantized_conv2d")
