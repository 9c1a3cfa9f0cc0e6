"""Dropout layers: `Dropout` (elements) and `Dropout2d` (whole channels).

Both are active only in training mode (``module.train()``); in eval mode they
return the input unchanged.
"""
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn.module import Module


class _DropoutNd(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"

    def _init_kwargs(self):
        return {"p": self.p, "inplace": self.inplace}


class Dropout(_DropoutNd):
    """Zero each element with probability ``p`` in training, scaling the rest by ``1 / (1 - p)``.

    Example:
        >>> y = nn.Dropout(0.5)(fxkit.ones(1000))   # about half zeros, the rest 2.0
    """

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """Zero whole channels of ``(N, C, H, W)`` inputs with probability ``p`` in training."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)
