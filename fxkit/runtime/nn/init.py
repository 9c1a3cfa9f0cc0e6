"""Parameter initialisation, following ``torch.nn.init`` (same formulas and defaults).

Every function fills its tensor in place and returns it. Samples come from
fxkit's generator (`fxkit.runtime.ops.factories.generator`), so
``fxkit.manual_seed`` makes model construction reproducible; the values differ
from PyTorch's, whose generator is another.

Example:
    >>> w = nn.Parameter(fxkit.empty(64, 3, 7, 7))
    >>> init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
"""
import math
import warnings

import numpy as np

from fxkit.errors import ShapeError
from fxkit.runtime.ops.factories import generator as _default_generator

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (``relu``: sqrt(2), ``tanh``: 5/3, ...)."""
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; expected one of "
                     f"{', '.join(_LINEAR)}, sigmoid, tanh, relu, leaky_relu, selu")


def _calculate_fan_in_and_fan_out(tensor):
    """``(fan_in, fan_out)`` of a weight: dims 1 and 0 times the receptive field."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ShapeError(f"fan in and fan out can not be computed for a tensor with fewer than 2 dimensions "
                         f"(shape {list(shape)})")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _sample_dtype(data):
    # float32 sampling for float32 and narrower parameters: no float64 detour.
    return np.float64 if data.dtype == np.float64 else np.float32


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with samples of U(a, b)."""
    data = tensor._data
    gen = generator or _default_generator(tensor.device.xp)
    values = gen.random(data.shape, dtype=_sample_dtype(data))
    values *= b - a
    values += a
    data[...] = values
    return tensor


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with samples of N(mean, std^2)."""
    data = tensor._data
    gen = generator or _default_generator(tensor.device.xp)
    values = gen.standard_normal(data.shape, dtype=_sample_dtype(data))
    values *= std
    values += mean
    data[...] = values
    return tensor


def constant_(tensor, val):
    """Fill with ``val``."""
    tensor._data[...] = val
    return tensor


def ones_(tensor):
    return constant_(tensor, 1)


def zeros_(tensor):
    return constant_(tensor, 0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def _is_empty(tensor):
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan). Linear and Conv2d use it with a=sqrt(5)."""
    if _is_empty(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    if _is_empty(tensor):
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)
