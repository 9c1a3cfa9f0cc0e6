"""`Linear` (``y = x W^T + b``) and `Identity`."""
import math

from fxkit.errors import ShapeError
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty


class Identity(Module):
    """Returns its input; any constructor arguments are ignored (PyTorch's placeholder layer)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last dimension.

    Args:
        in_features: size of each input's last dimension.
        out_features: size of each output's last dimension.
        bias: learn an additive bias.

    ``weight`` is ``(out_features, in_features)`` and both are initialised
    like PyTorch: U(-1/sqrt(in_features), 1/sqrt(in_features)).

    Example:
        >>> nn.Linear(20, 30)(fxkit.randn(128, 20)).shape
        (128, 30)
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        try:
            return F.linear(input, self.weight, self.bias)
        except ShapeError as exc:
            raise self._shape_error(input, exc) from exc

    def _shape_error(self, input, exc):
        shape = list(input.shape)
        return ShapeError(f"{exc}\n  hint: {self._get_name()}(in_features={self.in_features}, "
                          f"out_features={self.out_features}) got an input of shape {shape}; its last "
                          f"dimension must be in_features={self.in_features}")

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    def _init_kwargs(self):
        return {"in_features": self.in_features, "out_features": self.out_features, "bias": self.bias is not None}


class NonDynamicallyQuantizableLinear(Linear):
    """The Linear that MultiheadAttention uses as ``out_proj``; named like PyTorch's
    so that model printouts and quantization rules can tell it apart."""
