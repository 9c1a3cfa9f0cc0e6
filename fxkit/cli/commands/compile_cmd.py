"""``fxkit compile MODEL --backend numba --bench``: compile, check against eager, time both."""
import time

NAME = "compile"
HELP = "compile with a backend, check the outputs against eager, optionally time both (--bench)"
DESCRIPTION = """\
Compile MODEL with fxkit.compile for its input shapes (the zoo's example
shapes or --input), run the compiled module and the eager model on the same
random inputs and compare the outputs (the largest difference relative to the
largest eager value must stay within the dtype's tolerance, or --tolerance).
--bench then times eager and compiled calls side by side; --code prints the
generated code. The exit status is 1 when the outputs differ."""
EXAMPLES = """\
examples:
  fxkit compile mlp
  fxkit compile lstm_cell --backend numba --bench
  fxkit compile resnet18 --backend numpy --bench --repeat 20 --input 1,3,224,224
  fxkit compile resnet18 --backend onnxruntime --threads 2 --bench"""

TOLERANCES = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-4, "float64": 1e-10}
"""Largest allowed ``max|compiled - eager| / max|eager|`` per output dtype (others: exact)."""
BENCH_SECONDS = 2.0
"""With no --repeat, each side is timed for about this long (3 to 100 calls)."""


def configure(parser):
    from fxkit.cli.parser import non_negative_float, positive_int

    parser.add_argument("--backend", default="numpy", metavar="NAME",
                        help="the backend: numpy, numba, cupy, onnxruntime where installed (default: numpy)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="threads of each onnxruntime session (--backend onnxruntime; default: one per core)")
    parser.add_argument("--bench", action="store_true", help="time eager and compiled calls and compare")
    parser.add_argument("--repeat", type=positive_int, metavar="N", help="timed calls per side (default: about 2 s worth)")
    parser.add_argument("--tolerance", type=non_negative_float, metavar="TOL",
                        help="allowed largest difference relative to the largest eager value")
    parser.add_argument("--code", action="store_true", help="print the generated code")


def run(args, out, err):
    import fxkit
    from fxkit.cli.model_spec import concrete, input_specs, load_model, require_inputs

    with err.status(f"building {args.model}"):
        loaded = load_model(args.model, args.dtype)
    specs = concrete(require_inputs(loaded, input_specs(loaded, args.input, args.dtype), NAME), NAME)
    inputs = example_tensors(specs)
    with err.status(f"compiling {loaded.name} with the {args.backend} backend"):
        options = {"threads": args.threads} if args.threads is not None else {}
        compiled = fxkit.compile(loaded.model, backend=args.backend, example_inputs=inputs, **options)
    with err.status("running eager and compiled"):
        expected = loaded.model(*inputs)
        actual = compiled(*inputs)
    if args.code:
        from rich.syntax import Syntax

        out.print(Syntax(compiled.code, "python", theme="ansi_dark").highlight(compiled.code), soft_wrap=True)
    seconds = compiled.stats.seconds
    out.print(f"compiled {loaded.name} with the {args.backend} backend in {seconds:.2f} s", markup=False)
    worst, ok = _check(list(_leaves(actual)), list(_leaves(expected)), args.tolerance)
    if not ok:
        out.print(f"[bold red]compiled outputs differ from eager[/]: {worst}")
        return 1
    out.print(f"[green]compiled outputs match eager[/]: {worst}")
    if args.bench:
        _bench(loaded.model, compiled, inputs, args.repeat, args.backend, out, err)
    return 0


def example_tensors(specs):
    """Random tensors fitting ``specs`` (seeded: the same inputs every run): normal floats,
    integers in [0, 10), random booleans."""
    import numpy as np

    import fxkit
    from fxkit.transforms.infer_shapes import spec_meta

    rng = np.random.default_rng(0)
    tensors = []
    for spec in specs:
        meta = spec_meta(spec)
        if meta.dtype.is_floating_point:
            data = rng.standard_normal(meta.shape).astype(meta.dtype.np)
        elif meta.dtype.name == "bool":
            data = rng.random(meta.shape) < 0.5
        else:
            data = rng.integers(0, 10, meta.shape).astype(meta.dtype.np)
        tensors.append(fxkit.from_numpy(data))
    return tensors


def _leaves(value):
    """The tensors in an output structure, in order."""
    from fxkit.runtime.tensor import Tensor

    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)


def _check(actuals, expecteds, tolerance):
    """``(description of the worst output, all within tolerance)``."""
    import numpy as np

    if len(actuals) != len(expecteds):
        return f"the compiled module returned {len(actuals)} tensors, eager {len(expecteds)}", False
    worst_text, ok, worst = "no tensor outputs", True, -1.0
    for i, (actual, expected) in enumerate(zip(actuals, expecteds)):
        a, e = actual.numpy(), expected.numpy()
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"output {i} is {a.dtype}{list(a.shape)} compiled but {e.dtype}{list(e.shape)} eager", False)
        limit = tolerance if tolerance is not None else TOLERANCES.get(expected.dtype.name, 0.0)
        e64 = e.astype(np.float64)
        scale = float(np.abs(e64).max()) if e.size else 0.0
        diff = float(np.abs(a.astype(np.float64) - e64).max()) if e.size else 0.0
        relative = diff / scale if scale > 0 else diff
        if not relative <= limit:
            ok = False
        if relative > worst:
            worst = relative
            worst_text = (f"largest difference {diff:.3g} = {relative:.3g} of the largest eager value "
                          f"(output {i}, {expected.dtype.name}, tolerance {limit:g})")
    return worst_text, ok


def _bench(model, compiled, inputs, repeat, backend, out, err):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table

    sides = [("eager", model), (f"compiled ({backend})", compiled)]
    results = {}
    with Progress(TextColumn("timing {task.description}"), BarColumn(), MofNCompleteColumn(), console=err,
                  transient=True) as progress:
        for name, fn in sides:
            start = time.perf_counter()
            fn(*inputs)  # warm-up: caches, first-call allocation
            calls = repeat or max(3, min(100, int(BENCH_SECONDS / max(time.perf_counter() - start, 1e-6))))
            task = progress.add_task(name, total=calls)
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                fn(*inputs)
                times.append(time.perf_counter() - start)
                progress.advance(task)
            results[name] = sorted(times)
    table = Table("", "median", "best", "calls", title="eager vs compiled")
    for name, times in results.items():
        table.add_row(name, _ms(times[len(times) // 2]), _ms(times[0]), str(len(times)))
    eager, fast = (results[name][len(results[name]) // 2] for name, _ in sides)
    table.caption = f"speed-up (eager / compiled median): {eager / fast:.2f}x"
    out.print(table)


def _ms(seconds):
    return f"{seconds * 1e3:.3f} ms"
