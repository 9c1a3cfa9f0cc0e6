"""Shapes and costs of ResNet-50 without running it.

Traces ResNet-50, infers every node's shape from the op registry's shape
rules with a symbolic batch ``N`` (no tensor is allocated or computed), prints
the annotated graph, checks the inference against `ShapeProp` (which runs the
model) at N=1, and prints the profiler-style cost table: FLOPs, parameters
and bytes per node, with totals against the published 4.1 GMACs.

    python recipes/shape_and_cost.py
"""
import time

from rich.console import Console

import fxkit
import fxkit.models
from fxkit.transforms import ShapeProp, Sym, estimate_cost, infer_shapes
from fxkit.transforms.cost import format_count, summary

PUBLISHED_GMACS = 4.1  # He et al. 2016 / torchvision, for 1x3x224x224


def main():
    console = Console(width=150)
    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet50")
    gm = fxkit.symbolic_trace(model)

    start = time.perf_counter()
    infer_shapes(gm, ("N", 3, 224, 224))
    seconds = time.perf_counter() - start
    console.rule("ResNet-50 with a symbolic batch N: shapes from the registry's rules")
    print(gm.graph)
    print(f"\ninfer_shapes took {seconds * 1e3:.1f} ms for {len(gm.graph.nodes)} nodes (nothing was computed)")

    symbolic = [(n.name, n.meta.get("tensor_meta")) for n in gm.graph.nodes]
    x = fxkit.randn(1, 3, 224, 224)
    ShapeProp(gm).propagate(x)
    ran = [(n.name, n.meta.get("tensor_meta")) for n in gm.graph.nodes]
    agree = all(_at(sym, 1) == real for (_, sym), (_, real) in zip(symbolic, ran))
    print(f"ShapeProp (running the model on 1x3x224x224) agrees with infer_shapes at N=1: {agree}")
    if not agree:
        raise SystemExit("shape inference disagrees with running the model")

    console.rule("ResNet-50 with symbolic height and width")
    infer_shapes(gm, ("N", 3, "H", "W"))
    for node in gm.graph.nodes:
        if node.name in ("conv1", "maxpool", "layer2_0_conv2", "layer4_2_relu_2", "fc"):
            print(f"    %{node.name}: {_shape_text(node.meta['tensor_meta'])}")

    console.rule("Cost per node at 1x3x224x224")
    total = summary(gm, (1, 3, 224, 224), console=console)
    per_batch = estimate_cost(gm, ("N", 3, 224, 224))
    print(f"\nper batch of N images: {per_batch.flops} FLOPs, {per_batch.macs} MACs")
    print(f"MACs at N=1: {format_count(total.macs, 'MACs')} (published: {PUBLISHED_GMACS} GMACs, "
          f"{(total.macs / (PUBLISHED_GMACS * 1e9) - 1) * 100:+.1f}%); "
          f"{total.params:,} parameters")


def _at(meta, n):
    """A meta with the symbol N replaced by ``n``."""
    if meta is None:
        return None
    return meta._replace(shape=tuple(d.subs(N=n) if isinstance(d, Sym) else d for d in meta.shape))


def _shape_text(meta):
    return f"[{', '.join(str(d) for d in meta.shape)}]"


if __name__ == "__main__":
    main()
