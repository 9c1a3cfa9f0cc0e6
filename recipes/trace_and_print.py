"""Trace the seed's ``MyModule`` and LeNet, and look at what tracing captured.

For each model: the graph (one node a line, as DESIGN.md shows it), the
Python code regenerated from it, the same graph as a table, and the source
line every node came from. The traced module is checked against eager
execution on fresh random inputs: the outputs are bit-for-bit equal, because
the graph runs the same ops in the same order.

    python recipes/trace_and_print.py
"""
import numpy as np
from rich.console import Console

import fxkit
import fxkit.models
from fxkit import nn


class MyModule(nn.Module):
    """The seed's example: a parameter added to the input, a Linear, a clamp."""

    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(fxkit.rand(3, 4))
        self.linear = nn.Linear(4, 5)

    def forward(self, x):
        return self.linear(x + self.param).clamp(min=0.0, max=1.0)


def show(console, title, model, *inputs):
    """Trace ``model``, print graph, code, table and origins, and check it against eager."""
    gm = fxkit.symbolic_trace(model)
    console.rule(f"[bold]{title}")
    console.print("[bold]graph[/bold]")
    print(gm.graph)
    console.print("\n[bold]generated code[/bold]")
    print(gm.code)
    gm.graph.print_tabular(console)
    console.print("[bold]where each call came from[/bold]")
    for node in gm.graph.find_nodes(op="call"):
        loc = node.stack
        print(f"  %{node.name:<12} line {loc.lineno:>3} in {loc.function}: {loc.line}")
    traced, eager = gm(*inputs), model(*inputs)
    np.testing.assert_array_equal(traced.numpy(), eager.numpy())
    console.print(f"[green]traced output == eager output[/green] (shape {tuple(traced.shape)}, exact)\n")
    return gm


def main():
    console = Console()
    fxkit.manual_seed(0)
    show(console, "MyModule", MyModule(), fxkit.randn(3, 4))
    lenet, shapes = fxkit.models.get("lenet")
    show(console, "LeNet", lenet, fxkit.randn(*shapes[0]))


if __name__ == "__main__":
    main()
