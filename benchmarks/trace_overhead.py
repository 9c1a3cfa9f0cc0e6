"""Tracing and generated-code figures of issue 3, with torch.fx as the peer, in one run.

    python benchmarks/trace_overhead.py            # full run
    python benchmarks/trace_overhead.py --quick    # fewer repeats

Figures:
- ``symbolic_trace`` of ResNet-50 (fxkit's zoo model and the same architecture in
  torch.nn): fxkit time / torch.fx time, target <= 1.0; node counts of both graphs.
  Both include building the GraphModule and generating its code.
- ``recompile()`` of the traced ResNet-50: fxkit / torch.fx, target <= 1.0.
- ResNet-18 (3x64x64) GraphModule forward / eager forward, batch 1 and 8: target <= 1.03.
- ResNet-18 Interpreter run / GraphModule forward: reported.

Timings alternate between the two sides round by round, so drift on a shared
machine hits both alike, and report the best round of each (timeit's advice:
the minimum is the least disturbed by other processes). PyTorch is optional:
without it the torch.fx columns read "-".
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def paired(a, b, rounds):
    """Best seconds of ``a()`` and of ``b()``, timed alternately ``rounds`` times."""
    for fn in (a, b):  # warm up caches and lazily built state
        if fn is not None:
            fn()
    ta, tb = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        a()
        ta.append(time.perf_counter() - start)
        if b is not None:
            start = time.perf_counter()
            b()
            tb.append(time.perf_counter() - start)
    return min(ta), min(tb) if tb else None


def torch_resnet50():
    """torch.fx and the torch ResNet-50 of the test oracle, or None without PyTorch."""
    try:
        import torch.fx
    except ImportError:
        return None, None
    from tests.models.torch_reference import resnet50

    return torch.fx, resnet50().eval()


def bench_tracing(rounds):
    import fxkit
    import fxkit.models

    model = fxkit.models.resnet50().eval()
    fx, torch_model = torch_resnet50()
    gm = fxkit.symbolic_trace(model)
    res = {"nodes": len(gm.graph.nodes)}
    if fx is None:
        res["trace"] = paired(lambda: fxkit.symbolic_trace(model), None, rounds)
        res["recompile"] = paired(gm.recompile, None, rounds)
        return res
    tgm = fx.symbolic_trace(torch_model)
    res["torch nodes"] = len(tgm.graph.nodes)
    res["trace"] = paired(lambda: fxkit.symbolic_trace(model), lambda: fx.symbolic_trace(torch_model), rounds)
    res["recompile"] = paired(gm.recompile, tgm.recompile, rounds)
    return res


def bench_forward(rounds):
    import fxkit
    import fxkit.models

    with fxkit.no_grad():  # inference: parameters require grad, and recording is not what is measured
        return _forward_ratios(fxkit, rounds)


def _forward_ratios(fxkit, rounds):
    model = fxkit.models.resnet18().eval()
    gm = fxkit.symbolic_trace(model)
    rng = np.random.default_rng(0)
    res = {}
    for batch in (1, 8):
        x = fxkit.from_numpy(rng.standard_normal((batch, 3, 64, 64)).astype(np.float32))
        np.testing.assert_array_equal(gm(x).numpy(), model(x).numpy())
        res[f"gm/eager b{batch}"] = paired(lambda: gm(x), lambda: model(x), rounds)
    x = fxkit.from_numpy(rng.standard_normal((8, 3, 64, 64)).astype(np.float32))
    interpreter = fxkit.Interpreter(gm)
    res["interpreter/gm b8"] = paired(lambda: interpreter.run(x), lambda: gm(x), rounds)
    return res


def report(tracing, forward):
    from rich.console import Console
    from rich.table import Table

    ms = 1e3
    table = Table(title="Issue 3 figures (best of the rounds; ratio = fxkit / peer)")
    for col in ("figure", "fxkit ms", "peer", "peer ms", "ratio", "target"):
        table.add_column(col, justify="left" if col in ("figure", "peer") else "right")
    for key, label in (("trace", "symbolic_trace ResNet-50"), ("recompile", "recompile() ResNet-50")):
        mine, peer = tracing[key]
        table.add_row(label, f"{mine * ms:.2f}", "torch.fx", f"{peer * ms:.2f}" if peer else "-",
                      f"{mine / peer:.2f}" if peer else "-", "≤ 1.0")
    for batch in (1, 8):
        gm, eager = forward[f"gm/eager b{batch}"]
        table.add_row(f"ResNet-18 GraphModule forward, batch {batch}", f"{gm * ms:.2f}", "fxkit eager",
                      f"{eager * ms:.2f}", f"{gm / eager:.3f}", "≤ 1.03")
    interp, gm = forward["interpreter/gm b8"]
    table.add_row("ResNet-18 Interpreter.run, batch 8", f"{interp * ms:.2f}", "GraphModule", f"{gm * ms:.2f}",
                  f"{interp / gm:.3f}", "report")
    console = Console()
    console.print(table)
    torch_nodes = tracing.get("torch nodes")
    console.print(f"ResNet-50 graph nodes: fxkit {tracing['nodes']}, torch.fx "
                  f"{torch_nodes if torch_nodes is not None else '- (PyTorch not installed)'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    tracing = bench_tracing(10 if args.quick else 40)
    forward = bench_forward(5 if args.quick else 20)
    report(tracing, forward)


if __name__ == "__main__":
    main()
