"""`LSTM` and `GRU`: PyTorch's multi-layer recurrent layers, built from registry ops.

Parameter names, shapes, order and initialisation are PyTorch's
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, then
``..._reverse`` for the backward direction, layer by layer), so a torch
``state_dict`` loads unchanged. Gates are stacked as PyTorch stacks them
(LSTM: input, forget, cell, output; GRU: reset, update, new).

The forward unrolls the time loop into ``linear``/``chunk``/``sigmoid``/
``tanh`` calls, as PyTorch's CPU kernel computes it: the input projection of
the whole sequence in one ``linear``, then one hidden projection per step. The
layers are leaves for `fxkit.symbolic_trace` (one ``call`` node, as every
built-in layer): the unrolled loop depends on the sequence length, which a
graph input's shape does not carry. Shape inference, the backends and the ONNX
exporter see the unrolled ops, traced on the concrete sequence length (a
symbolic batch dimension works; the sequence length must be static).
"""
import math

from fxkit.errors import ShapeError
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty
from fxkit.runtime.registry import get_op

_cat = get_op("cat")
_stack = get_op("stack")
_zeros_like = get_op("zeros_like")


def _lstm_step(x_proj, h, c, w_hh, b_hh):
    """One LSTM step from the precomputed input projection (PyTorch's ``LSTMCell`` order)."""
    gates = F.linear(h, w_hh, b_hh) + x_proj
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, -1)
    c = forgetgate.sigmoid() * c + ingate.sigmoid() * cellgate.tanh()
    return outgate.sigmoid() * c.tanh(), c


def _gru_step(x_proj, h, w_hh, b_hh):
    """One GRU step from the precomputed input projection (PyTorch's ``GRUCell`` order)."""
    i_r, i_z, i_n = x_proj.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    reset = (h_r + i_r).sigmoid()
    update = (h_z + i_z).sigmoid()
    new = (i_n + h_n * reset).tanh()
    return (h - new) * update + new


class _RNNBase(Module):
    """The layers, directions and weights shared by `LSTM` and `GRU`."""

    _GATES = 1
    _MODE = ""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__()
        name = self._MODE
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ShapeError(f"{name}: hidden_size must be a positive int, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ShapeError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability "
                             f"of an element being zeroed, got {dropout!r}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        directions = 2 if bidirectional else 1
        gates = self._GATES * hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                self.register_parameter("weight_ih" + suffix,
                                        Parameter(empty(gates, layer_input, device=device, dtype=dtype)))
                self.register_parameter("weight_hh" + suffix,
                                        Parameter(empty(gates, hidden_size, device=device, dtype=dtype)))
                if bias:
                    self.register_parameter("bias_ih" + suffix, Parameter(empty(gates, device=device, dtype=dtype)))
                    self.register_parameter("bias_hh" + suffix, Parameter(empty(gates, device=device, dtype=dtype)))
        self.reset_parameters()

    def reset_parameters(self):
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self):
        """Nothing to do: PyTorch packs the weights into one buffer for cuDNN; models call this."""

    def _weights(self, layer, direction):
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = self.__getattr__
        return (get("weight_ih" + suffix), get("weight_hh" + suffix),
                get("bias_ih" + suffix) if self.bias else None, get("bias_hh" + suffix) if self.bias else None)

    def _prepare(self, input, states):
        """``input`` as ``(L, N, H_in)`` and each state as ``(layers * directions, N, H)``, zeros
        where none was given; also whether the input was batched."""
        name = self._MODE
        rank = len(input.shape)
        if rank not in (2, 3):
            raise ShapeError(f"{name}: Expected input to be 2D or 3D, got {rank}D tensor of shape "
                             f"{list(input.shape)}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {input.shape[-1]}")
        batched = rank == 3
        if not batched:
            input = input.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        expected = (self.num_layers * (2 if self.bidirectional else 1), input.shape[1], self.hidden_size)
        out = []
        for state in states:
            if state is None:
                # NOTE: zeros shaped after the input, so a symbolic batch dimension stays symbolic
                out.append(_zeros_like(input[0, :, :1]).unsqueeze(0).expand(expected[0], -1, expected[2]))
                continue
            if len(state.shape) != (3 if batched else 2):
                raise ShapeError(f"{name}: for {'batched' if batched else 'unbatched'} {rank}-D input, hx should "
                                 f"also be {3 if batched else 2}-D but got {len(state.shape)}-D tensor")
            state = state if batched else state.unsqueeze(1)
            if tuple(state.shape) != expected:
                raise ShapeError(f"{name}: Expected hidden size {list(expected)}, got {list(state.shape)}")
            out.append(state)
        return input, out, batched

    def _run(self, input, states, step):
        """Every layer and direction over the sequence; returns the last layer's output and the
        final states, each ``(layers * directions, N, H)``, ordered as PyTorch's."""
        directions = 2 if self.bidirectional else 1
        length = input.shape[0]
        finals = [[] for _ in states]
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
                projected = F.linear(input, w_ih, b_ih)
                current = [s[layer * directions + direction] for s in states]
                seq = [None] * length
                for t in (range(length - 1, -1, -1) if direction else range(length)):
                    current = step(projected[t], *current, w_hh, b_hh)
                    seq[t] = current[0]
                outputs.append(_stack(seq, 0))
                for final, value in zip(finals, current):
                    final.append(value)
            input = outputs[0] if directions == 1 else _cat(outputs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                input = F.dropout(input, self.dropout, True)
        return input, [_stack(f, 0) for f in finals]

    def _finish(self, output, states, batched):
        if not batched:
            return output.squeeze(1), [s.squeeze(1) for s in states]
        return (output.transpose(0, 1) if self.batch_first else output), states

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        defaults = {"num_layers": 1, "bias": True, "batch_first": False, "dropout": 0.0, "bidirectional": False}
        return text + "".join(f", {k}={getattr(self, k)}" for k, v in defaults.items() if getattr(self, k) != v)

    def _init_kwargs(self):
        return {"input_size": self.input_size, "hidden_size": self.hidden_size, "num_layers": self.num_layers,
                "bias": self.bias, "batch_first": self.batch_first, "dropout": self.dropout,
                "bidirectional": self.bidirectional}


class LSTM(_RNNBase):
    """A multi-layer long short-term memory network, as ``torch.nn.LSTM``.

    Args:
        input_size, hidden_size: features of the input and of the hidden state.
        num_layers: stacked layers, each reading the previous one's output.
        bias: learn ``bias_ih`` and ``bias_hh``.
        batch_first: input and output are ``(N, L, H)`` instead of ``(L, N, H)``.
        dropout: dropout on the outputs of every layer but the last, in training.
        bidirectional: also run each layer backwards in time; outputs are concatenated.
        proj_size: must be 0 (PyTorch's projected LSTM is not supported).

    ``forward(input, (h0, c0))`` returns ``(output, (h_n, c_n))``; the states default to
    zeros and are ``(num_layers * directions, N, hidden_size)``.

    Example:
        >>> lstm = nn.LSTM(10, 20, num_layers=2, batch_first=True)
        >>> output, (h, c) = lstm(fxkit.randn(3, 5, 10))
        >>> output.shape, h.shape
        ((3, 5, 20), (2, 3, 20))
    """

    _GATES = 4
    _MODE = "LSTM"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        if proj_size:
            raise ShapeError(f"LSTM: proj_size={proj_size} (a projected LSTM) is not supported by fxkit; "
                             f"use proj_size=0 and a Linear layer on the output")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.proj_size = 0

    def forward(self, input, hx=None):
        h0, c0 = (None, None) if hx is None else hx
        input, states, batched = self._prepare(input, (h0, c0))
        output, states = self._run(input, states, _lstm_step)
        output, (h_n, c_n) = self._finish(output, states, batched)
        return output, (h_n, c_n)


class GRU(_RNNBase):
    """A multi-layer gated recurrent unit network, as ``torch.nn.GRU``.

    Args are `LSTM`'s (without ``proj_size``). ``forward(input, h0)`` returns
    ``(output, h_n)``; ``h0`` defaults to zeros.

    Example:
        >>> output, h = nn.GRU(10, 20, bidirectional=True)(fxkit.randn(5, 3, 10))
        >>> output.shape, h.shape
        ((5, 3, 40), (2, 3, 20))
    """

    _GATES = 3
    _MODE = "GRU"

    def forward(self, input, hx=None):
        input, states, batched = self._prepare(input, (hx,))
        output, states = self._run(input, states, lambda x, h, w, b: (_gru_step(x, h, w, b),))
        output, (h_n,) = self._finish(output, states, batched)
        return output, h_n
