"""ONNX import rules of ``LSTM`` and ``GRU`` (what ``torch.onnx.export`` writes for
``nn.LSTM``/``nn.GRU``, one node per layer): unrolled over the sequence into the
registry ops `fxkit.nn.LSTM`/`GRU` use, as fxkit exports them.

The sequence length must be known from the model's shapes (the unrolled loop
has one step per element); the batch may be symbolic. ONNX stacks the gates
as ``i, o, f, c`` (LSTM) and ``z, r, h`` (GRU), and the bias as the input
bias then the recurrent one. Peepholes, ``clip``, ``input_forget``, other
activations and ``sequence_lens`` shorter than the sequence are refused.
"""
import numpy as np

from fxkit.interop.onnx_import_rules import import_rule, refuse

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


def _check(c, length):
    name = c.op_type
    activations = [a.decode() if isinstance(a, bytes) else a for a in c.attr("activations", [])]
    if activations and [a.lower() for a in activations] != [a.lower() for a in _DEFAULT_ACTIVATIONS[name]] * (
            len(activations) // len(_DEFAULT_ACTIVATIONS[name])):
        raise refuse(c, f"{name} with activations {activations}")
    if c.attr("clip") is not None or c.attr("input_forget", 0):
        raise refuse(c, f"{name} with clip or input_forget")
    if name == "LSTM" and c.value(7) is not None:
        raise refuse(c, "LSTM with peephole weights (input P)")
    if c.value(4) is not None:
        lens = np.asarray(c.const(4))
        if not (lens == length).all():
            raise refuse(c, f"{name} with sequence_lens {lens.tolist()} shorter than the sequence ({length})")


def _layout(c):
    """``(x as (L, N, I), directions, hidden size, sequence length, batch-first layout)``."""
    batch_first = c.attr("layout", 0) == 1
    shape = c.shape(0)
    if shape is None or type(shape[1 if batch_first else 0]) is not int:
        raise refuse(c, f"{c.op_type} over a sequence of unknown length (the loop is unrolled); export with a "
                        f"static sequence length")
    x = c.tensor(0)
    if batch_first:
        x = c.call("transpose", x, 0, 1)
    directions = {"forward": 1, "reverse": 1, "bidirectional": 2}[c.attr("direction", "forward")]
    return x, directions, int(c.attr("hidden_size")), shape[1 if batch_first else 0], batch_first


def _state(c, i, x, d, directions, hidden):
    """Initial state input ``i`` for direction ``d`` (``(N, H)``), zeros shaped after ``x`` when absent."""
    if c.value(i) is not None:
        state = c.tensor(i)
        if c.attr("layout", 0) == 1:
            state = c.call("transpose", state, 0, 1)
        return c.call("getitem", state, d)
    zeros = c.call("zeros_like", c.call("getitem", x, (0, slice(None), slice(0, 1))))
    return c.call("expand", zeros, -1, hidden)


def _weights(c, d, gates, hidden):
    """``(W, R, input bias, recurrent bias)`` of direction ``d`` (biases None without ``B``)."""
    w, r = c.call("getitem", c.tensor(1), d), c.call("getitem", c.tensor(2), d)
    if c.value(3) is None:
        return w, r, None, None
    b = c.call("getitem", c.tensor(3), d)
    return w, r, c.call("getitem", b, slice(0, gates * hidden)), c.call("getitem", b, slice(gates * hidden, None))


def _lstm_step(c, x_proj, h, cell, r, rb):
    gates = c.call("add", c.call("linear", h, r, rb), x_proj)
    parts = c.call("chunk", gates, 4, -1)
    i, o, f, g = (c.call("getitem", parts, k) for k in range(4))
    cell = c.call("add", c.call("mul", c.call("sigmoid", f), cell),
                  c.call("mul", c.call("sigmoid", i), c.call("tanh", g)))
    return c.call("mul", c.call("sigmoid", o), c.call("tanh", cell)), cell


def _gru_step(c, x_proj, h, r, rb):
    xz, xr, xh = (c.call("getitem", c.call("chunk", x_proj, 3, -1), k) for k in range(3))
    if c.attr("linear_before_reset", 0):
        parts = c.call("chunk", c.call("linear", h, r, rb), 3, -1)
        hz, hr, hh = (c.call("getitem", parts, k) for k in range(3))
        z, reset = c.call("sigmoid", c.call("add", hz, xz)), c.call("sigmoid", c.call("add", hr, xr))
        new = c.call("tanh", c.call("add", xh, c.call("mul", hh, reset)))
    else:
        rs = c.call("chunk", r, 3, 0)
        bs = c.call("chunk", rb, 3, 0) if rb is not None else None
        pieces = [(c.call("getitem", rs, k), None if bs is None else c.call("getitem", bs, k)) for k in range(3)]
        z = c.call("sigmoid", c.call("add", c.call("linear", h, *pieces[0]), xz))
        reset = c.call("sigmoid", c.call("add", c.call("linear", h, *pieces[1]), xr))
        new = c.call("tanh", c.call("add", xh, c.call("linear", c.call("mul", reset, h), *pieces[2])))
    return c.call("add", c.call("mul", c.call("sub", h, new), z), new)


def _recurrent(c, gates):
    x, directions, hidden, length, batch_first = _layout(c)
    _check(c, length)
    reverse = c.attr("direction", "forward") == "reverse"
    is_lstm = c.op_type == "LSTM"
    outputs, finals_h, finals_c = [], [], []
    for d in range(directions):
        w, r, wb, rb = _weights(c, d, gates, hidden)
        projected = c.call("linear", x, w, wb)
        h = _state(c, 5, x, d, directions, hidden)
        cell = _state(c, 6, x, d, directions, hidden) if is_lstm else None
        seq = [None] * length
        for t in (range(length - 1, -1, -1) if d == 1 or reverse else range(length)):
            x_t = c.call("getitem", projected, t)
            if is_lstm:
                h, cell = _lstm_step(c, x_t, h, cell, r, rb)
            else:
                h = _gru_step(c, x_t, h, r, rb)
            seq[t] = h
        outputs.append(c.call("stack", seq, 0))
        finals_h.append(h)
        finals_c.append(cell)
    y = c.call("stack", outputs, 1)  # (L, D, N, H)
    y_h = c.call("stack", finals_h, 0)  # (D, N, H)
    y_c = c.call("stack", finals_c, 0) if is_lstm else None
    if batch_first:
        y = c.call("permute", y, 2, 0, 1, 3)
        y_h = c.call("transpose", y_h, 0, 1)
        y_c = c.call("transpose", y_c, 0, 1) if is_lstm else None
    return [y, y_h, y_c] if is_lstm else [y, y_h]


@import_rule("LSTM")
def _lstm(c):
    return _recurrent(c, 4)


@import_rule("GRU")
def _gru(c):
    return _recurrent(c, 3)
