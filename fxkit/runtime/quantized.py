"""Quantized tensors: integers that stand for real numbers through a scale and a zero point.

An affine-quantized integer ``q`` stands for ``(q - zero_point) * scale``.
`quantize_per_tensor` and `quantize_per_channel` build a `QTensor`, as
``torch.quantize_per_tensor`` builds a quantized tensor. Inside graphs the same
arithmetic is two registry ops over plain integer tensors, `quantize_affine`
and `dequantize_affine`, with the scale and zero point as arguments: passes,
shape rules, backends and ``fxkit.save`` then handle quantized graphs with no
special case, and the saved weights are int8 arrays.

Rounding and clamping are PyTorch's CPU kernels': ``x * (1 / scale) + zero_point``
in float32, rounded half to even, clamped to the dtype's range (bit-identical to
``torch.quantize_per_tensor``). Dequantization is ``(q - zero_point) * scale`` in
float32.

Example:
    >>> q = fxkit.quantize_per_tensor(fxkit.tensor([-1.0, 0.25, 0.3]), 0.1, 2, fxkit.int8)
    >>> q.int_repr()
    tensor([-8, 4, 5], dtype=fxkit.int8)
    >>> q.dequantize()
    tensor([-1.0000, 0.2000, 0.3000])
"""
import math
import numbers

import numpy as np

from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd.function import nondifferentiable
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dim
from fxkit.runtime.ops.nn_checks import dtype_of
from fxkit.runtime.tensor import Tensor

QUANT_DTYPES = (_dt.int8, _dt.uint8)


def quant_dtype(dtype, where):
    """``dtype`` as an fxkit dtype that quantized values may have (int8 or uint8), else a DTypeError."""
    try:
        resolved = _dt.as_dtype(dtype)
    except DTypeError:
        resolved = None
    if resolved not in QUANT_DTYPES:
        raise DTypeError(f"{where}: dtype {dtype!r} is not supported for quantized values; "
                         f"use fxkit.int8 or fxkit.uint8")
    return resolved


def quant_range(dtype):
    """``(quant_min, quant_max)`` of a quantized dtype: (-128, 127) for int8, (0, 255) for uint8."""
    info = np.iinfo(quant_dtype(dtype, "quant_range").np)
    return int(info.min), int(info.max)


def _along(xp, values, axis, ndim):
    """Per-channel ``values`` shaped to broadcast along ``axis`` of an ``ndim``-d array."""
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _qparam_arrays(xp, scale, zero_point, axis, ndim):
    scale = xp.asarray(scale, dtype=np.float32)
    zero_point = xp.asarray(zero_point, dtype=np.float32)
    if axis is not None:
        axis = normalize_dim(axis, ndim, "quantize_affine")
        scale, zero_point = _along(xp, scale, axis, ndim), _along(xp, zero_point, axis, ndim)
    return scale, zero_point


def _require_float(name, x):
    """Refuse integer inputs to quantization; takes an array or a `TensorMeta`."""
    dtype = dtype_of(x)
    if not dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating-point input, got {dtype.name}; "
                         f"only real numbers are quantized")


def _require_quantized(name, x):
    dtype = dtype_of(x)
    if dtype not in QUANT_DTYPES:
        raise DTypeError(f"{name}: expected an int8 or uint8 input (quantized values), got {dtype.name}")


def _quantize_rule(input, scale, zero_point, dtype, axis=None):
    _require_float("quantize_affine", input)
    return TensorMeta(input.shape, quant_dtype(dtype, "quantize_affine"), input.device)


@op("quantize_affine", kind="other", shape_rule=_quantize_rule, method=False)
def quantize_affine(xp, input, scale, zero_point, dtype, axis=None):
    """Affine quantization of a float tensor to int8/uint8, PyTorch's rounding and clamping.

    ``clamp(round_half_even(x * (1 / scale) + zero_point), qmin, qmax)``, in float32.

    Args:
        input: the float tensor.
        scale: a positive number, or a 1-D float tensor (one per channel along ``axis``).
        zero_point: an int, or a 1-D integer tensor (one per channel along ``axis``).
        dtype: fxkit.int8 or fxkit.uint8.
        axis: the channel axis of per-channel parameters; None for one scale.

    Example:
        >>> fxkit.quantize_affine(fxkit.tensor([0.25, 0.35]), 0.1, 0, fxkit.int8)
        tensor([2, 4], dtype=fxkit.int8)
    """
    _require_float("quantize_affine", input)
    dtype = quant_dtype(dtype, "quantize_affine")
    qmin, qmax = quant_range(dtype)
    scale, zero_point = _qparam_arrays(xp, scale, zero_point, axis, input.ndim)
    inverse = np.float32(1.0) / scale
    q = input.astype(np.float32, copy=False) * inverse
    # NOTE: the zero point is added before rounding, as PyTorch's CPU kernels do; adding it
    # after differs in float32 ties (x / scale = -4.4999967 with zero point 139 gives 134, not 135).
    q += zero_point
    xp.rint(q, out=q)
    xp.clip(q, qmin, qmax, out=q)
    return q.astype(dtype.np)


def _dequantize_rule(input, scale, zero_point, axis=None):
    _require_quantized("dequantize_affine", input)
    return TensorMeta(input.shape, _dt.float32, input.device)


@op("dequantize_affine", kind="other", shape_rule=_dequantize_rule, method=False)
def dequantize_affine(xp, input, scale, zero_point, axis=None):
    """The float32 values ``(q - zero_point) * scale`` of quantized integers.

    Args:
        input: an int8 or uint8 tensor.
        scale, zero_point, axis: as in `quantize_affine`.
    """
    _require_quantized("dequantize_affine", input)
    scale, zero_point = _qparam_arrays(xp, scale, zero_point, axis, input.ndim)
    out = input.astype(np.float32)
    out -= zero_point
    out *= scale
    return out


nondifferentiable("it works on integer (quantized) values; quantization-aware training uses "
                  "fake quantization (fxkit.transforms.quantize.prepare_qat)", "quantize_affine", "dequantize_affine")


class QTensor:
    """A quantized tensor: integer values, the scale(s) and zero point(s) they stand for.

    Built by `quantize_per_tensor` or `quantize_per_channel`; the names of its
    methods are PyTorch's. It supports no arithmetic: dequantize it first, or
    let a converted graph run the integer kernels.

    Attributes:
        shape, dtype, device: those of the integer values (dtype int8 or uint8).
    """

    __slots__ = ("_int", "_scale", "_zero_point", "_axis")
    is_quantized = True

    def __init__(self, int_repr, scale, zero_point, axis=None):
        self._int = int_repr
        self._scale = scale
        self._zero_point = zero_point
        self._axis = axis

    @property
    def shape(self):
        return self._int.shape

    @property
    def dtype(self):
        return self._int.dtype

    @property
    def device(self):
        return self._int.device

    @property
    def ndim(self):
        return self._int.ndim

    def qscheme(self):
        """``"per_tensor_affine"`` or ``"per_channel_affine"``."""
        return "per_tensor_affine" if self._axis is None else "per_channel_affine"

    def int_repr(self):
        """The integer values, as a new int8/uint8 `Tensor`."""
        return Tensor._make(self._int._data.copy(), self._int.device)

    def q_scale(self):
        """The scale (a Python float) of a per-tensor quantized tensor."""
        self._require_scheme("per_tensor_affine", "q_scale", "q_per_channel_scales")
        return self._scale

    def q_zero_point(self):
        """The zero point (a Python int) of a per-tensor quantized tensor."""
        self._require_scheme("per_tensor_affine", "q_zero_point", "q_per_channel_zero_points")
        return self._zero_point

    def q_per_channel_scales(self):
        """The scales of a per-channel quantized tensor (float64, like PyTorch)."""
        self._require_scheme("per_channel_affine", "q_per_channel_scales", "q_scale")
        return self._scale.to(_dt.float64)

    def q_per_channel_zero_points(self):
        """The zero points of a per-channel quantized tensor (int64)."""
        self._require_scheme("per_channel_affine", "q_per_channel_zero_points", "q_zero_point")
        return self._zero_point.to(_dt.int64)

    def q_per_channel_axis(self):
        """The channel axis of a per-channel quantized tensor."""
        self._require_scheme("per_channel_affine", "q_per_channel_axis", "q_scale")
        return self._axis

    def dequantize(self):
        """The float32 tensor the integers stand for: ``(q - zero_point) * scale``."""
        return dequantize_affine(self._int, self._scale, self._zero_point, self._axis)

    def _require_scheme(self, scheme, method, instead):
        if self.qscheme() != scheme:
            raise DTypeError(f"{method}(): the tensor is quantized {self.qscheme()}, not {scheme}; "
                             f"use {instead}() instead")

    def __len__(self):
        return len(self._int)

    def __repr__(self):
        if self._axis is None:
            params = f"scale={self._scale}, zero_point={self._zero_point}"
        else:
            params = (f"scales={self._scale.tolist()}, zero_points={self._zero_point.tolist()}, "
                      f"axis={self._axis}")
        return (f"QTensor({self.dequantize()!r}, dtype={self.dtype!r}, "
                f"quantization_scheme={self.qscheme()}, {params})")


def _as_float_tensor(value, where):
    if not isinstance(value, Tensor):
        raise DTypeError(f"{where}: expected an fxkit Tensor, got {type(value).__name__}")
    if not value.dtype.is_floating_point:
        raise DTypeError(f"{where}: expected a floating-point tensor, got {value.dtype.name}; "
                         f"only real numbers are quantized")
    return value


def _check_scale(scale, where):
    if not math.isfinite(scale) or scale <= 0:
        raise ShapeError(f"{where}: scale must be a positive finite number, got {scale}")


def _check_zero_point(zero_point, dtype, where):
    qmin, qmax = quant_range(dtype)
    if not qmin <= zero_point <= qmax:
        raise ShapeError(f"{where}: zero_point {zero_point} is outside the range of {dtype.name} "
                         f"[{qmin}, {qmax}]")


def quantize_per_tensor(input, scale, zero_point, dtype):
    """Quantize ``input`` with one scale and zero point, like ``torch.quantize_per_tensor``.

    Args:
        input: a float tensor.
        scale: a positive number.
        zero_point: an int in the dtype's range.
        dtype: fxkit.int8 or fxkit.uint8.

    Returns:
        A `QTensor`.

    Example:
        >>> fxkit.quantize_per_tensor(fxkit.randn(4), 0.05, 0, fxkit.int8).int_repr()
    """
    where = "quantize_per_tensor"
    _as_float_tensor(input, where)
    dtype = quant_dtype(dtype, where)
    if isinstance(scale, Tensor) or isinstance(zero_point, Tensor):
        raise ShapeError(f"{where}: scale and zero_point are numbers; for one per channel use "
                         f"quantize_per_channel")
    scale, zero_point = float(scale), _integer(zero_point, where)
    _check_scale(scale, where)
    _check_zero_point(zero_point, dtype, where)
    return QTensor(quantize_affine(input, scale, zero_point, dtype), scale, zero_point)


def quantize_per_channel(input, scales, zero_points, axis, dtype):
    """Quantize ``input`` with one scale and zero point per slice along ``axis``,
    like ``torch.quantize_per_channel``.

    Args:
        input: a float tensor.
        scales: a 1-D tensor (or sequence) of positive numbers, one per channel.
        zero_points: a 1-D tensor (or sequence) of ints, one per channel.
        axis: the channel dimension.
        dtype: fxkit.int8 or fxkit.uint8.

    Returns:
        A `QTensor`.
    """
    where = "quantize_per_channel"
    _as_float_tensor(input, where)
    dtype = quant_dtype(dtype, where)
    if not isinstance(axis, numbers.Integral):
        raise DTypeError(f"{where}: axis must be an int, got {axis!r}")
    if input.ndim == 0:
        raise IndexOutOfRangeError(f"{where}: a 0-d tensor has no channel axis")
    axis = normalize_dim(int(axis), input.ndim, where)
    scale_values = _host_vector(scales, np.float64, where, "scales")
    zp_values = _host_vector(zero_points, np.int64, where, "zero_points")
    channels = input.shape[axis]
    for name, values in (("scales", scale_values), ("zero_points", zp_values)):
        if values.shape != (channels,):
            raise ShapeError(f"{where}: expected {channels} {name} (the size of dimension {axis} of the input "
                             f"of shape {list(input.shape)}), got {values.size}")
    for s in scale_values:
        _check_scale(float(s), where)
    for z in zp_values:
        _check_zero_point(int(z), dtype, where)
    device = input.device
    scale_t = Tensor._make(device.xp.asarray(scale_values.astype(np.float32)), device)
    zp_t = Tensor._make(device.xp.asarray(zp_values.astype(np.int32)), device)
    return QTensor(quantize_affine(input, scale_t, zp_t, dtype, axis), scale_t, zp_t, axis)


def _integer(value, where):
    if isinstance(value, numbers.Integral):
        return int(value)
    raise DTypeError(f"{where}: zero_point must be an int, got {value!r}")


def _host_vector(values, np_dtype, where, what):
    if isinstance(values, Tensor):
        values = values._host()
    array = np.asarray(values)
    if array.ndim != 1:
        raise ShapeError(f"{where}: {what} must be 1-D, got shape {list(array.shape)}")
    if np_dtype is np.int64 and array.dtype.kind not in "iu":
        raise DTypeError(f"{where}: {what} must be integers, got {array.dtype}")
    return array.astype(np_dtype)
