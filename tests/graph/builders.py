"""Hand-built graphs shared by the graph tests (no tracer involved)."""
import numpy as np

import fxkit
from fxkit import nn, ops
from fxkit.graph import Graph, SourceLocation


class MyModule(nn.Module):
    """The seed's example: a parameter added to the input, a Linear, a clamp."""

    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(fxkit.rand(3, 4))
        self.linear = nn.Linear(4, 5)

    def forward(self, x):
        return self.linear(x + self.param).clamp(min=0.0, max=1.0)


def my_module_graph(with_stack=False):
    """The graph docs/architecture.md describes for MyModule, built by hand."""
    g = Graph()
    x = g.placeholder("x")
    param = g.get_attr("param")
    add = g.call(ops.add, (x, param))
    linear = g.call("linear", (add,))
    clamp = g.call(ops.clamp, (linear,), {"min": 0.0, "max": 1.0})
    g.output(clamp)
    if with_stack:
        for node in g.nodes:
            node.meta["stack"] = SourceLocation("model.py", 14, "forward",
                                                "return self.linear(x + self.param).clamp(min=0.0, max=1.0)")
    return g


def my_module_reference(model, x):
    """float64 numpy reference of MyModule's forward."""
    x = x.numpy().astype(np.float64)
    w = model.linear.weight.numpy().astype(np.float64)
    b = model.linear.bias.numpy().astype(np.float64)
    return np.clip((x + model.param.numpy()) @ w.T + b, 0.0, 1.0)


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))
