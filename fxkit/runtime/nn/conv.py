"""`Conv2d` and `Conv3d`: convolutions over ``(N, C, H, W)`` and ``(N, C, D, H, W)`` inputs."""
import math

from fxkit.errors import ShapeError
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty
from fxkit.runtime.tensor import Tensor

_PADDING_STRINGS = ("same", "valid")


def pair(value, name, n=2):
    """``3`` -> ``(3, 3)``; a 2-sequence stays as a tuple (PyTorch's ``_pair``; ``_triple`` with ``n=3``)."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n or not all(isinstance(v, int) for v in value):
        what = "a pair" if n == 2 else f"{n}"
        raise ValueError(f"{name} must be an int or {what} of ints, got {value!r}")
    return value


class _ConvNd(Module):
    """The convolution layer over ``_DIMS`` spatial dims: `Conv2d` and `Conv3d` set the class attributes."""

    _DIMS = 2
    _FUNCTION = "conv2d"
    _LAYOUT = "(N, C, H, W)"

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        name, n = type(self).__name__, self._DIMS
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"{name}: groups must be a positive integer, got {groups!r}")
        if in_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) must be divisible by groups ({groups})")
        if out_channels % groups:
            raise ValueError(f"{name}: out_channels ({out_channels}) must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"{name}: padding_mode {padding_mode!r} is not supported; fxkit supports "
                             f"padding_mode='zeros' (pad explicitly with F.pad for other modes)")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = pair(kernel_size, "kernel_size", n)
        self.stride = pair(stride, "stride", n)
        self.dilation = pair(dilation, "dilation", n)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}")
            if padding == "same" and self.stride != (1,) * n:
                raise ValueError(f"{name}: padding='same' is not supported for strided convolutions "
                                 f"(stride={self.stride})")
            self.padding = padding
        else:
            self.padding = pair(padding, "padding", n)
        self.output_padding = (0,) * n
        self.transposed = False
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size,
                                      device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()


    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        # NOTE: only concrete tensors are checked; a tracer's proxy has no rank to test.
        if isinstance(input, Tensor) and input._data.ndim != self._DIMS + 2:
            raise self._rank_error(input)
        try:
            return getattr(F, self._FUNCTION)(input, self.weight, self.bias, self.stride, self.padding,
                                              self.dilation, self.groups)
        except ShapeError as exc:
            if isinstance(input, Tensor) and input._data.shape[1] != self.in_channels:
                raise ShapeError(f"{exc}\n  hint: {self._get_name()}({self.extra_repr()}) expects "
                                 f"in_channels={self.in_channels}, got an input of shape "
                                 f"{list(input.shape)} with {input.shape[1]} channels") from exc
            raise

    def _rank_error(self, input):
        shape = list(input.shape)
        hint = ("add a batch dimension with x.unsqueeze(0)" if len(shape) == self._DIMS + 1
                else f"pass a batch shaped {self._LAYOUT}")
        return ShapeError(f"{self._get_name()}: expected a {self._DIMS + 2}-D input {self._LAYOUT}, got a "
                          f"{len(shape)}-D input of shape {shape}\n  hint: {hint}")

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._DIMS:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._DIMS:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s

    def _init_kwargs(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": self.padding if isinstance(self.padding, str) else list(self.padding),
                "dilation": list(self.dilation), "groups": self.groups, "bias": self.bias is not None,
                "padding_mode": self.padding_mode}


class Conv2d(_ConvNd):
    """2-D convolution (cross-correlation, like PyTorch) with a learned kernel.

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: int or (kH, kW).
        stride: int or pair.
        padding: int, pair, ``"valid"`` (none) or ``"same"`` (output size =
            input size; stride must be 1).
        dilation: int or pair.
        groups: split channels into groups convolved separately.
        bias: learn an additive bias per output channel.
        padding_mode: only ``"zeros"`` is supported.

    ``weight`` is ``(out_channels, in_channels // groups, kH, kW)``,
    initialised like PyTorch (kaiming_uniform_ with a=sqrt(5)).

    Unlike PyTorch, the input must be batched ``(N, C, H, W)``: a 3-D input is
    refused with a hint to add the batch dimension (``x.unsqueeze(0)``).

    Example:
        >>> nn.Conv2d(3, 8, 3, padding=1)(fxkit.randn(2, 3, 32, 32)).shape
        (2, 8, 32, 32)
    """


class Conv3d(_ConvNd):
    """3-D convolution (cross-correlation, like PyTorch) with a learned kernel: video models' layer.

    Takes `Conv2d`'s arguments with triples ``(kD, kH, kW)``; ``weight`` is
    ``(out_channels, in_channels // groups, kD, kH, kW)``. The input must be batched
    ``(N, C, D, H, W)``.

    Example:
        >>> nn.Conv3d(3, 8, 3, padding=1)(fxkit.randn(1, 3, 4, 16, 16)).shape
        (1, 8, 4, 16, 16)
    """

    _DIMS = 3
    _FUNCTION = "conv3d"
    _LAYOUT = "(N, C, D, H, W)"
