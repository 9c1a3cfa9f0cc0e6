"""Every route into fxkit on every model of the corpus (issue 14), in one table.

    python benchmarks/models.py                      # the whole corpus (about half an hour on 2 cores)
    python benchmarks/models.py --quick              # one timing round per contender
    python benchmarks/models.py --models resnet18 BertModel   # names or "library/name"
    python benchmarks/models.py --write-docs         # also rewrite docs/models.md from the results
    python benchmarks/models.py --set generality     # the vision generality set (models outside the corpus)

Routes:
- ``from_torch``: ``fxkit.from_torch`` on the torch model with its example inputs and a symbolic
  batch (``torch.export.Dim("N")``): the torch.export route.
- ``from_onnx``: ``torch.onnx.export`` (TorchScript route, opset 17, symbolic batch) then
  ``fxkit.from_onnx``.

For each model and route: the max relative error of the import against PyTorch eager
(max |fxkit - torch| / max |torch| over every output, float32) at batch 3 (exports and
examples use batch 2), and the time of one forward of fxkit eager (the imported module),
``fxkit.compile`` with the numpy, the numba and the onnxruntime backends (``delegate``: the
imported graph's supported partitions on onnxruntime sessions, the rest on numpy), and a bare
onnxruntime session on the torch-exported file (``onnxruntime``, from_onnx rows), as
ratios to PyTorch eager (its milliseconds in its own column). A route that fails on a model is
a row with the first line of its error, never left out. Each contender keeps its best round
(the least disturbed on a shared machine), and every side gets the same threads (``--threads``,
default 1: PyTorch's intra-op pool, BLAS through threadpoolctl, numba and onnxruntime). Speed is
reported only; targets live in the performance issue.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
from tests.corpus import NAMES, build, generality_vision  # noqa: E402
from tests.corpus.onnx_files import export_onnx  # noqa: E402

BATCH = 3
DOCS = os.path.join(ROOT, "docs", "models.md")
TIMED = ("fxkit eager", "numpy", "numba", "delegate", "onnxruntime")
COMPILED = {"numpy": "numpy", "numba": "numba", "delegate": "onnxruntime"}
"""Column -> ``fxkit.compile`` backend; the delegate's sessions get ``--threads`` threads."""
THREADS = [1]


def limit_threads(n):
    """Give PyTorch, BLAS, numba and onnxruntime ``n`` threads each (a fair race on a shared machine)."""
    import torch
    from threadpoolctl import threadpool_limits

    THREADS[0] = n
    torch.set_num_threads(n)
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass
    return threadpool_limits(n)


def best(fn, rounds, budget=2.0):
    """Best seconds of ``fn()`` over up to ``rounds`` rounds (fewer once ``budget`` seconds are spent)."""
    fn()  # warm up: lazily built state, kernel compilation
    times, spent = [], 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        spent += times[-1]
        if spent > budget:
            break
    return min(times)


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:160]


def as_outputs(value):
    """Outputs of an fxkit call as a flat tuple of float64 arrays."""
    if isinstance(value, (tuple, list)):
        return tuple(a for v in value for a in as_outputs(v))
    if isinstance(value, dict):
        return tuple(a for v in value.values() for a in as_outputs(v))
    return (np.asarray(value.numpy() if hasattr(value, "numpy") else value, np.float64),)


def max_error(actual, expected):
    if len(actual) != len(expected):
        raise ValueError(f"{len(actual)} outputs where PyTorch gives {len(expected)}")
    errors = []
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            raise ValueError(f"output shape {a.shape} where PyTorch gives {e.shape}")
        errors.append(float(np.max(np.abs(a - e)) / max(float(np.max(np.abs(e))), 1e-30)))
    return max(errors)


def import_from_torch(entry):
    """`fxkit.from_torch` through torch.export with a symbolic batch: one import serves every batch size."""
    import torch

    batch = torch.export.Dim("N", min=1, max=64)
    dynamic = {name: {dim: batch} for name, dim in zip(entry.input_names, entry.batch_dims)}
    return fxkit.from_torch(entry.model, entry.kwargs(entry.example_inputs), dynamic_shapes=dynamic)


def import_from_onnx(entry):
    return fxkit.from_onnx(export_onnx(entry.name))


def onnxruntime_call(entry, inputs):
    import onnxruntime

    proto = export_onnx(entry.name)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS[0]
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {info.name: x.numpy() for info, x in zip(session.get_inputs(), inputs)}
    return lambda: session.run(None, feeds)


ROUTES = {"from_torch": import_from_torch, "from_onnx": import_from_onnx}


def run_route(entry, route, inputs, expected, torch_seconds, rounds):
    """One row: the route's error against PyTorch and its timings as ratios to PyTorch eager."""
    row = {"model": entry.name, "route": route}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = ROUTES[route](entry)
    except Exception as error:  # noqa: BLE001  (every failure is a row of the table)
        row["error"] = first_line(error)
        return row
    ours = tuple(fxkit.from_numpy(x.numpy()) for x in inputs)
    try:
        row["max rel err"] = max_error(as_outputs(imported(*ours)), expected)
        row["fxkit eager"] = best(lambda: imported(*ours), rounds) / torch_seconds
    except Exception as error:  # noqa: BLE001
        row["error"] = f"runs: {first_line(error)}"
        return row
    for column, backend in COMPILED.items():
        options = {"threads": THREADS[0]} if backend == "onnxruntime" else {}
        try:
            compiled = fxkit.compile(imported, backend=backend, example_inputs=list(ours), **options)
            error = max_error(as_outputs(compiled(*ours)), expected)
            row["max rel err"] = max(row["max rel err"], error)
            row[column] = best(lambda: compiled(*ours), rounds) / torch_seconds
        except Exception as error:  # noqa: BLE001
            row[column] = f"fails: {first_line(error)}"
    if route == "from_onnx":
        try:
            row["onnxruntime"] = best(onnxruntime_call(entry, ours), rounds) / torch_seconds
        except Exception as error:  # noqa: BLE001
            row["onnxruntime"] = f"fails: {first_line(error)}"
    return row


def run_model(name, rounds, console):
    entry = build(name)
    inputs = entry.make_inputs(BATCH, 1)
    expected = entry(*inputs)
    torch_seconds = best(lambda: entry(*inputs), rounds)
    rows = []
    for route in ROUTES:
        start = time.perf_counter()
        row = run_route(entry, route, inputs, expected, torch_seconds, rounds)
        row["torch ms"] = torch_seconds * 1e3
        console.log(f"{name} {route}: {row.get('error') or 'max rel err %.1e' % row['max rel err']} "
                    f"({time.perf_counter() - start:.0f} s)")
        rows.append(row)
    return rows


def cell(row, key):
    value = row.get(key)
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if key == "max rel err":
        return f"{value:.1e}"
    if key == "torch ms":
        return f"{value:.1f}"
    return f"{value:.2f}x"


COLUMNS = ("model", "route", "max rel err", *TIMED, "torch ms")


def show(rows, console):
    table = Table(title=f"Models through every route (batch {BATCH}, {THREADS[0]} thread(s)); "
                        f"times / PyTorch eager")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("model", "route") else "right")
    for row in rows:
        if "error" in row:
            table.add_row(row["model"], row["route"], f"[red]{row['error'][:100]}[/red]",
                          *([""] * (len(COLUMNS) - 3)))
        else:
            table.add_row(*(cell(row, c) for c in COLUMNS))
    console.print(table)


def coverage(rows):
    """``{route: (imported, within 1e-4, total)}``."""
    result = {}
    for route in ROUTES:
        mine = [r for r in rows if r["route"] == route]
        ok = [r for r in mine if "error" not in r]
        result[route] = (len(ok), sum(r["max rel err"] < 1e-4 for r in ok), len(mine))
    return result


EXAMPLE = """Exporters compute shapes inside the file: swin pads its windows with `Shape -> Gather -> Mod ->
Unsqueeze -> Concat -> Pad`. `from_onnx` keeps such values exact in rank and value, so one import
serves every input size:

```python
import numpy as np
from onnx import TensorProto, helper, numpy_helper

import fxkit

def const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.int64), name)

nodes = [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Gather", ["shape", "one"], ["width"], axis=0),       # 0-d
         helper.make_node("Mod", ["width", "seven"], ["rest"]),
         helper.make_node("Sub", ["seven", "rest"], ["missing"]),
         helper.make_node("Mod", ["missing", "seven"], ["pad"]),
         helper.make_node("Unsqueeze", ["pad", "axis0"], ["pad1"]),            # 1-D
         helper.make_node("Concat", ["zeros", "pad1"], ["pads"], axis=0),
         helper.make_node("Pad", ["x", "pads"], ["y"])]
graph = helper.make_graph(nodes, "pad_to_windows",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "Wp"])],
                          [const("one", 1), const("seven", 7), const("axis0", [0]), const("zeros", [0, 0, 0])])
gm = fxkit.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
print(gm(fxkit.ones(2, 9)).shape, gm(fxkit.ones(3, 14)).shape)
```

```output
(2, 14) (3, 14)
```"""


def write_docs(rows):
    lines = ["# Real models: the corpus through every route", "",
             "Generated by `python benchmarks/models.py --write-docs`; do not edit by hand. The corpus",
             "(`tests/corpus/`) builds 16 torchvision, 4 timm and 6 tiny Hugging Face transformers models with",
             "random, non-degenerate weights. `from_torch` is `fxkit.from_torch` on the torch model; `from_onnx`",
             "is `torch.onnx.export` (TorchScript route, opset 17, symbolic batch) then `fxkit.from_onnx`.",
             f"Max relative error is max |fxkit - torch| / max |torch| over all outputs at batch {BATCH}, across",
             "fxkit eager and the compiled backends (`delegate` is `fxkit.compile(..., backend=\"onnxruntime\")`,",
             "`onnxruntime` a bare session on the exported file); times are one forward, as ratios to PyTorch eager",
             "(its milliseconds in the last column; best round, every contender on the same threads, on a",
             "shared 2-core machine: ratios are indicative only). A failing route",
             "shows the first line of its error.", "", "## Coverage", "",
             "| route | imports | within 1e-4 | of |", "|---|---|---|---|"]
    for route, (ok, close, total) in coverage(rows).items():
        lines.append(f"| `{route}` | {ok} | {close} | {total} |")
    lines += ["", "## Per model", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        if "error" in row:
            cells = [row["model"], row["route"], row["error"].replace("|", "\\|")] + [""] * (len(COLUMNS) - 3)
        else:
            cells = [cell(row, c).replace("|", "\\|") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Shape arithmetic in the files", "", EXAMPLE]
    with open(DOCS, "w") as f:
        f.write("\n".join(lines) + "\n")


SETS = {"corpus": NAMES, "generality": generality_vision.NAMES}
"""``--set`` -> its model names: the corpus, or the vision generality set (tests/corpus/generality_vision.py)."""


def select(patterns, names=NAMES):
    if not patterns:
        return list(names)
    chosen = [n for n in names if any(p == n or p == n.split("/")[1] for p in patterns)]
    unknown = [p for p in patterns if not any(p == n or p == n.split("/")[1] for n in names)]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {', '.join(names)}")
    return chosen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timing round per contender")
    parser.add_argument("--models", nargs="*", help="corpus names (resnet18, timm/resnet18, BertModel, ...)")
    parser.add_argument("--write-docs", action="store_true", help=f"rewrite {os.path.relpath(DOCS, ROOT)}")
    parser.add_argument("--threads", type=int, default=1, help="threads for every contender (default 1)")
    parser.add_argument("--set", choices=sorted(SETS), default="corpus",
                        help="the corpus (default) or the vision generality set")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 180)
    limits = limit_threads(args.threads)  # noqa: F841  (kept alive: the BLAS limit lasts as long as it)
    names = select(args.models, SETS[args.set])
    if args.write_docs and (args.set != "corpus" or len(names) != len(NAMES)):
        raise SystemExit("--write-docs needs the whole corpus (leave out --models and --set)")
    rounds = 1 if args.quick else 5
    rows = []
    for name in names:
        try:
            rows += run_model(name, rounds, console)
        except Exception as error:  # noqa: BLE001  (the corpus model itself failed to build or run)
            rows += [{"model": name, "route": route, "error": f"corpus: {first_line(error)}"} for route in ROUTES]
    show(rows, console)
    for route, (ok, close, total) in coverage(rows).items():
        console.print(f"{route}: {ok}/{total} import, {close} within 1e-4")
    if args.write_docs:
        write_docs(rows)
        console.print(f"wrote {os.path.relpath(DOCS, ROOT)}")


if __name__ == "__main__":
    main()
