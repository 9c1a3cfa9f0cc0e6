"""An LSTM cell written with ``chunk`` and pointwise ops, as in the seed talks.

The gate arithmetic is spelled out (two ``F.linear`` calls, ``chunk(4, 1)``,
sigmoid/tanh) rather than hidden in one fused op, which makes it the standard
example for elementwise fusion. Parameter names and layout are
``torch.nn.LSTMCell``'s, so its state_dict loads unchanged.
"""
import math

import fxkit
from fxkit import nn
from fxkit.nn import functional as F


class LSTMCell(nn.Module):
    """One LSTM step: ``(input, hx, cx) -> (hy, cy)``.

    Args:
        input_size: features of ``input`` ``(N, input_size)``.
        hidden_size: features of the states ``hx``/``cx`` ``(N, hidden_size)``.

    Unlike ``torch.nn.LSTMCell.forward(input, (hx, cx))`` the two states are
    separate arguments, so the cell traces and compiles with flat tensor inputs.

    Example:
        >>> cell = LSTMCell(128, 256)
        >>> hy, cy = cell(fxkit.randn(32, 128), fxkit.randn(32, 256), fxkit.randn(32, 256))
    """

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(fxkit.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(fxkit.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(fxkit.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(fxkit.empty(4 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def forward(self, input, hx, cx):
        gates = F.linear(input, self.weight_ih, self.bias_ih) + F.linear(hx, self.weight_hh, self.bias_hh)
        ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
        ingate = F.sigmoid(ingate)
        forgetgate = F.sigmoid(forgetgate)
        cellgate = F.tanh(cellgate)
        outgate = F.sigmoid(outgate)
        cy = (forgetgate * cx) + (ingate * cellgate)
        hy = outgate * F.tanh(cy)
        return hy, cy

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"
