"""Elementwise fusion, as in the seed talk's FusionGroup printouts.

Traces the talk's ``for i in range(10): x = x * x`` and the zoo's LSTM cell,
records their shapes with `ShapeProp`, fuses them with `fuse_elementwise`
and prints each graph before and after: every group of connected pointwise
ops becomes one ``call[fused_N]`` whose body prints nested under the graph
(``with fused_0 = graph(...)``). A fused op runs the same ops in the same
order, so the outputs stay bit-for-bit equal; the recipe checks that, and
the float64 reference of the LSTM cell.

    python recipes/fusion.py
"""
import numpy as np
from rich.console import Console

import fxkit
import fxkit.models
from fxkit.transforms import FusedOp, ShapeProp, fuse_elementwise


def square_ten_times(x):
    """The talk's loop: ten dependent multiplies, one kernel once fused."""
    for _ in range(10):
        x = x * x
    return x


def lstm_cell_reference(cell, x, hx, cx):
    """The LSTM cell in float64 numpy (PyTorch's gate order: input, forget, cell, output)."""
    w_ih, w_hh, b_ih, b_hh = (p.numpy().astype(np.float64) for p in
                              (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
    x, hx, cx = (t.numpy().astype(np.float64) for t in (x, hx, cx))
    gates = x @ w_ih.T + b_ih + hx @ w_hh.T + b_hh
    i, f, g, o = np.split(gates, 4, axis=1)
    sigmoid = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    cy = sigmoid(f) * cx + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(cy), cy


def fuse_and_show(console, title, model, inputs):
    """Trace, record shapes, print before/after fusion, and check the outputs."""
    gm = fxkit.symbolic_trace(model)
    ShapeProp(gm).propagate(*inputs)
    expected = gm(*inputs)
    console.rule(f"[bold]{title}: traced")
    print(gm.graph)
    gm = fuse_elementwise(gm)
    console.rule(f"[bold]{title}: fused")
    print(gm.graph)
    console.print("\n[bold]generated code[/bold]")
    print(gm.code)
    groups = [n.target for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, FusedOp)]
    for fused in groups:
        ops = [n.target.name for n in fused.graph.nodes if n.op == "call"]
        console.print(f"{fused.name}: {len(ops)} ops ({', '.join(ops)}) -> {fused.num_outputs} output(s)")
    outputs = gm(*inputs)
    pairs = zip(outputs, expected) if isinstance(expected, tuple) else [(outputs, expected)]
    for got, want in pairs:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    console.print("[green]fused output == unfused output[/green] (exact)\n")
    return gm, outputs


def main():
    console = Console()
    fxkit.manual_seed(0)
    x = fxkit.from_numpy(np.random.default_rng(0).uniform(0.999, 1.001, size=5).astype(np.float32))
    gm, _ = fuse_and_show(console, "x = x * x, ten times", square_ten_times, (x,))
    assert sum(n.op == "call" for n in gm.graph.nodes) == 1, "the chain should be one fused call"

    # The talk's sizes: batch 3, 10 input features, 20 hidden.
    cell, _ = fxkit.models.get("lstm_cell", input_size=10, hidden_size=20)
    inputs = (fxkit.randn(3, 10), fxkit.randn(3, 20), fxkit.randn(3, 20))
    gm, (hy, cy) = fuse_and_show(console, "LSTM cell", cell, inputs)
    ref_hy, ref_cy = lstm_cell_reference(cell, *inputs)
    np.testing.assert_allclose(hy.numpy(), ref_hy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cy.numpy(), ref_cy, rtol=1e-5, atol=1e-6)
    console.print("[green]fused LSTM cell matches the float64 reference[/green] (rtol 1e-5)")


if __name__ == "__main__":
    main()
