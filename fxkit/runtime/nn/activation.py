"""Activation layers: `ReLU`, `ReLU6`, `Hardsigmoid`, `Hardswish`, `Mish`, `GELU`, `SiLU`, `Sigmoid`,
`Tanh`, `Softmax`, `LogSoftmax`.

Each forwards to the op of the same name; ``inplace=True`` writes the result
into the input, as in PyTorch.
"""
import warnings

from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn.module import Module


class ReLU(Module):
    """``max(x, 0)`` elementwise.

    Example:
        >>> nn.ReLU()(fxkit.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return input.relu_() if self.inplace else F.relu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""

    def _init_kwargs(self):
        return {"inplace": self.inplace}


class _InplaceActivation(Module):
    """A layer that applies the op ``_op`` (an ``F`` name) with its ``inplace`` flag."""

    _op = None

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        op = getattr(F, self._op)
        return op(input, inplace=True) if self.inplace else op(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""

    def _init_kwargs(self):
        return {"inplace": self.inplace}


class ReLU6(_InplaceActivation):
    """``min(max(x, 0), 6)`` elementwise (MobileNetV2).

    Example:
        >>> nn.ReLU6()(fxkit.tensor([-1.0, 3.0, 8.0]))
        tensor([0., 3., 6.])
    """

    _op = "relu6"


class Hardsigmoid(_InplaceActivation):
    """``relu6(x + 3) / 6`` elementwise (MobileNetV3's squeeze-excitation gate)."""

    _op = "hardsigmoid"

    def extra_repr(self):
        return ""  # PyTorch's Hardsigmoid does not show its inplace flag


class Hardswish(_InplaceActivation):
    """``x * relu6(x + 3) / 6`` elementwise (MobileNetV3)."""

    _op = "hardswish"

    def extra_repr(self):
        return ""  # PyTorch's Hardswish does not show its inplace flag


class Mish(_InplaceActivation):
    """``x * tanh(softplus(x))`` elementwise."""

    _op = "mish"


class SiLU(Module):
    """``x * sigmoid(x)`` elementwise (a.k.a. swish)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return input.silu_() if self.inplace else F.silu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""

    def _init_kwargs(self):
        return {"inplace": self.inplace}


class GELU(Module):
    """Gaussian error linear unit: exact (``approximate='none'``) or the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"

    def _init_kwargs(self):
        return {"approximate": self.approximate}


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    """``tanh(x)`` elementwise."""

    def forward(self, input):
        return F.tanh(input)


def _legacy_softmax_dim(name, ndim):
    # PyTorch's _get_softmax_dim for a dim left as None: 0 for 0-D, 1-D and 3-D inputs, else 1.
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  f"as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """``exp(x) / sum(exp(x))`` along ``dim``.

    Example:
        >>> nn.Softmax(dim=-1)(fxkit.randn(2, 5)).sum(-1)
        tensor([1.0000, 1.0000])
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else _legacy_softmax_dim("softmax", input.ndim)
        return F.softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"

    def _init_kwargs(self):
        return {"dim": self.dim}


class LogSoftmax(Module):
    """``log(softmax(x))`` along ``dim``, computed stably."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else _legacy_softmax_dim("log_softmax", input.ndim)
        return F.log_softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"

    def _init_kwargs(self):
        return {"dim": self.dim}
