"""Two hand-written passes over a traced LeNet, each checked against an independent expectation.

1. ``ReluToGelu``, a `Transformer`: every ``relu`` call becomes a ``gelu`` call.
   Expected: LeNet's forward written out eagerly with ``F.gelu`` in place of ``F.relu``.
2. ``clip_after_convs``, graph editing: after every ``Conv2d`` call a ``clamp``
   node limits the activations to [-limit, limit], and the conv's users read it.
   Expected: the same eager forward with the clamp applied to each conv output.

The outputs before and after each pass are printed side by side with their
distance to the expectation.

    python recipes/custom_pass.py
"""
import numpy as np
from rich.console import Console
from rich.table import Table

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.nn import functional as F


class ReluToGelu(fxkit.Transformer):
    """``call[relu](%x)`` -> ``call[gelu](%x)``; every other node is copied."""

    def call(self, target, args, kwargs):
        if target is fxkit.ops.relu:
            return super().call(fxkit.ops.gelu, args, kwargs)
        return super().call(target, args, kwargs)


def clip_after_convs(gm, limit):
    """Insert ``clamp(conv, min=-limit, max=limit)`` after every Conv2d call, in place.

    Before:  %conv1 = call[self.conv1](%x);  %max_pool2d = call[max_pool2d](%conv1, 2)
    After:   %conv1 = call[self.conv1](%x);  %clamp = call[clamp](%conv1, min=-limit, max=limit)
             %max_pool2d = call[max_pool2d](%clamp, 2)
    """
    graph = gm.graph
    for node in list(graph.nodes):
        if node.is_module(gm, nn.Conv2d):
            with graph.inserting_after(node):
                clipped = graph.call(fxkit.ops.clamp, (node,), {"min": -limit, "max": limit})
            clipped.meta["stack"] = node.stack
            node.replace_all_uses_with(clipped, delete_user_cb=lambda user: user is not clipped)
    graph.lint()
    gm.recompile()
    return gm


def lenet_eager(model, x, activation, after_conv):
    """LeNet's forward (fxkit/models/lenet.py, eval mode) with the activation and a
    post-conv function as parameters: the independent expectation of both passes."""
    x = activation(F.max_pool2d(after_conv(model.conv1(x)), 2))
    x = activation(F.max_pool2d(model.conv2_drop(after_conv(model.conv2(x))), 2))
    x = x.view(-1, 320)
    x = activation(model.fc1(x))
    x = model.fc2(x)
    return F.log_softmax(x, dim=1)


def compare(table, name, actual, expected, before):
    err = float(np.abs(actual.numpy().astype(np.float64) - expected.numpy()).max())
    moved = float(np.abs(actual.numpy().astype(np.float64) - before.numpy()).max())
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)
    table.add_row(name, f"{moved:.3e}", f"{err:.3e}", "[green]ok[/green]")


def main():
    console = Console()
    fxkit.manual_seed(0)
    model, shapes = fxkit.models.get("lenet")
    x = fxkit.randn(*shapes[0])
    gm = fxkit.symbolic_trace(model)
    before = gm(x)
    identity = lambda t: t  # noqa: E731

    gelu_gm = ReluToGelu(gm).transform()
    console.rule("[bold]relu -> gelu (Transformer)")
    print(gelu_gm.graph)
    assert not gelu_gm.graph.find_nodes(op="call", target=fxkit.ops.relu)
    gelu_out = gelu_gm(x)

    limit = 0.25
    clipped_gm = clip_after_convs(fxkit.symbolic_trace(model), limit)
    console.rule(f"[bold]clamp to ±{limit} after every conv (graph editing)")
    print(clipped_gm.code)
    clipped_out = clipped_gm(x)

    clip = lambda t: t.clamp(min=-limit, max=limit)  # noqa: E731
    table = Table(title="LeNet outputs after each pass (batch of 64)")
    for col in ("pass", "max |after - before|", "max |after - expected|", "check"):
        table.add_column(col, justify="left" if col == "pass" else "right")
    compare(table, "no pass (traced vs eager)", before, lenet_eager(model, x, F.relu, identity), before)
    compare(table, "relu -> gelu", gelu_out, lenet_eager(model, x, F.gelu, identity), before)
    compare(table, "clamp after conv", clipped_out, lenet_eager(model, x, F.relu, clip), before)
    console.print(table)


if __name__ == "__main__":
    main()
