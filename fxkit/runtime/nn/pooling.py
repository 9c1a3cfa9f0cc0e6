"""Pooling layers: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`, `AdaptiveMaxPool2d` and the
3-D `MaxPool3d`, `AvgPool3d`, `AdaptiveAvgPool3d` (the 2-D layers with their ``_FUNCTION`` swapped).

Arguments are stored as given (an int stays an int), like PyTorch, so the
printed layers read the same as PyTorch's.
"""
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn.module import Module


def _jsonable(value):
    return list(value) if isinstance(value, tuple) else value


def _size(value):
    """Sizes arrive as lists after a JSON round trip; keep them tuples like PyTorch."""
    return tuple(value) if isinstance(value, list) else value


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows of ``(N, C, H, W)`` inputs.

    Args:
        kernel_size: int or pair.
        stride: defaults to ``kernel_size``.
        padding: implicit negative-infinity padding on both sides.
        dilation: spacing between window elements.
        return_indices: also return the argmax indices.
        ceil_mode: round the output size up instead of down.

    Example:
        >>> nn.MaxPool2d(2)(fxkit.randn(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    _FUNCTION = "max_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = _size(kernel_size)
        self.stride = _size(stride) if stride is not None else self.kernel_size
        self.padding = _size(padding)
        self.dilation = _size(dilation)
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return getattr(F, self._FUNCTION)(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")

    def _init_kwargs(self):
        return {"kernel_size": _jsonable(self.kernel_size), "stride": _jsonable(self.stride),
                "padding": _jsonable(self.padding), "dilation": _jsonable(self.dilation),
                "return_indices": self.return_indices, "ceil_mode": self.ceil_mode}


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows of ``(N, C, H, W)`` inputs.

    Args:
        kernel_size: int or pair.
        stride: defaults to ``kernel_size``.
        padding: implicit zero padding on both sides.
        ceil_mode: round the output size up instead of down.
        count_include_pad: count the zero padding in the divisor.
        divisor_override: divide by this instead of the window size.
    """

    _FUNCTION = "avg_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = _size(kernel_size)
        self.stride = _size(stride) if stride is not None else self.kernel_size
        self.padding = _size(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return getattr(F, self._FUNCTION)(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                          self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def _init_kwargs(self):
        return {"kernel_size": _jsonable(self.kernel_size), "stride": _jsonable(self.stride),
                "padding": _jsonable(self.padding), "ceil_mode": self.ceil_mode,
                "count_include_pad": self.count_include_pad, "divisor_override": self.divisor_override}


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed ``output_size`` (int, pair, or None to keep a side).

    Example:
        >>> nn.AdaptiveAvgPool2d((1, 1))(fxkit.randn(2, 512, 7, 7)).shape
        (2, 512, 1, 1)
    """

    _FUNCTION = "adaptive_avg_pool2d"

    def __init__(self, output_size):
        super().__init__()
        self.output_size = _size(output_size)

    def forward(self, input):
        return getattr(F, self._FUNCTION)(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"

    def _init_kwargs(self):
        return {"output_size": _jsonable(self.output_size)}


class AdaptiveMaxPool2d(Module):
    """Max pooling to a fixed ``output_size`` (int, pair, or None to keep a side).

    Example:
        >>> nn.AdaptiveMaxPool2d((3, 2))(fxkit.randn(2, 8, 7, 5)).shape
        (2, 8, 3, 2)
    """

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = _size(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)

    def extra_repr(self):
        return f"output_size={self.output_size}"

    def _init_kwargs(self):
        return {"output_size": _jsonable(self.output_size), "return_indices": self.return_indices}


class MaxPool3d(MaxPool2d):
    """Max over ``kernel_size`` windows of ``(N, C, D, H, W)`` inputs; `MaxPool2d`'s arguments as triples.

    Example:
        >>> nn.MaxPool3d(2)(fxkit.randn(1, 3, 4, 8, 8)).shape
        (1, 3, 2, 4, 4)
    """

    _FUNCTION = "max_pool3d"


class AvgPool3d(AvgPool2d):
    """Mean over ``kernel_size`` windows of ``(N, C, D, H, W)`` inputs; `AvgPool2d`'s arguments as triples."""

    _FUNCTION = "avg_pool3d"


class AdaptiveAvgPool3d(AdaptiveAvgPool2d):
    """Average pooling of ``(N, C, D, H, W)`` inputs to a fixed ``output_size`` (int, triple, None keeps a side).

    Example:
        >>> nn.AdaptiveAvgPool3d(1)(fxkit.randn(2, 512, 1, 4, 4)).shape
        (2, 512, 1, 1, 1)
    """

    _FUNCTION = "adaptive_avg_pool3d"
