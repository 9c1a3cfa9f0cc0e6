"""ResNet-18 to ONNX, run by onnxruntime, and back into fxkit.

Exports the zoo's ResNet-18 with ``fxkit.onnx.export`` (the batch dimension
symbolic, so the file runs at any batch size), runs the file with
onnxruntime at another batch size, imports it again with ``fxkit.from_onnx``
and compares the three outputs. The imported model is an ordinary
GraphModule: the recipe fuses its elementwise ops with ``fuse_elementwise``
to show that fxkit's passes apply to ONNX models too.

    pip install 'fxkit[onnx]'
    python recipes/onnx_roundtrip.py
"""
import collections
import pathlib
import sys
import tempfile
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import fxkit
import fxkit.models
from fxkit.transforms import fuse_elementwise


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def main():
    console = Console()
    try:
        import onnxruntime
    except ImportError:
        console.print("this recipe needs onnx and onnxruntime: pip install 'fxkit[onnx]'")
        return 0
    fxkit.manual_seed(0)
    model, shapes = fxkit.models.get("resnet18")
    example = fxkit.randn(2, *shapes[0][1:])

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "resnet18.onnx"
        start = time.perf_counter()
        proto = fxkit.onnx.export(model, example, path)
        console.print(f"exported {path.name}: {path.stat().st_size / 2**20:.1f} MiB, {len(proto.graph.node)} nodes, "
                      f"opset {proto.opset_import[0].version}, input {_shape(proto.graph.input[0])} "
                      f"({time.perf_counter() - start:.2f} s)")
        counts = collections.Counter(node.op_type for node in proto.graph.node)
        table = Table("ONNX op", "nodes", title="what the file holds")
        for op_type, count in counts.most_common():
            table.add_row(op_type, str(count))
        console.print(table)

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        imported = fxkit.from_onnx(path)

    x = fxkit.randn(5, *shapes[0][1:])  # another batch size than the example's
    eager = model(x).numpy()
    runtime = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    reimported = imported(x).numpy()
    fused = fuse_elementwise(imported)
    results = Table("path", "output", "relative error vs fxkit eager", title="ResNet-18 at batch 5")
    results.add_row("fxkit eager", str(list(eager.shape)), "-")
    results.add_row("onnxruntime", str(list(runtime.shape)), f"{relative_error(runtime, eager):.2e}")
    results.add_row("fxkit.from_onnx", str(list(reimported.shape)), f"{relative_error(reimported, eager):.2e}")
    results.add_row("  + fuse_elementwise", str(list(eager.shape)), f"{relative_error(fused(x).numpy(), eager):.2e}")
    console.print(results)
    worst = max(relative_error(r, eager) for r in (runtime, reimported))
    console.print(f"the three agree within {worst:.1e} relative error "
                  f"({'within' if worst < 1e-5 else 'OUTSIDE'} the 1e-5 target)")
    return 0 if worst < 1e-5 else 1


def _shape(value_info):
    dims = value_info.type.tensor_type.shape.dim
    return "[" + ", ".join(d.dim_param or str(d.dim_value) for d in dims) + "]"


if __name__ == "__main__":
    sys.exit(main())
