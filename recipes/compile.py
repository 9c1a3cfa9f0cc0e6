"""Compile the seed talk's ``x = x * x`` loop and the LSTM cell, print the generated code, time it.

``fxkit.compile(model, backend=..., example_inputs=...)`` traces the model,
runs the backend's passes, specialises the graph to the inputs' shapes and
dtypes and generates code over raw arrays. For every registered CPU backend
this prints the code (and the kernels, for backends that generate them),
checks the outputs against eager mode and prints the time per call beside
eager's, best of several runs.

    python recipes/compile.py
"""
import timeit

import numpy as np
from rich.console import Console
from rich.table import Table

import fxkit
import fxkit.models
from fxkit.backends import backend_names, get_backend


def square_ten_times(x):
    """The talk's loop: ten dependent multiplies."""
    for _ in range(10):
        x = x * x
    return x


def seconds_per_call(fn, args):
    """Best time of one call, over runs of about 0.1 s each."""
    number = max(1, int(0.1 / max(timeit.timeit(lambda: fn(*args), number=1), 1e-7)))
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=5)) / number


def show(value):
    return f"{value * 1e6:.1f} us" if value < 1e-3 else f"{value * 1e3:.2f} ms"


def compile_and_time(console, title, model, inputs, table):
    """Compile ``model`` with every CPU backend, print what was generated, check and time it."""
    expected = model(*inputs)
    eager = seconds_per_call(model, inputs)
    for name in backend_names():
        if "cpu" not in get_backend(name).device_types:
            continue
        compiled = fxkit.compile(model, backend=name, example_inputs=inputs)
        console.rule(f"[bold]{title}: {name} backend")
        print(compiled.code)
        for kernel, source in compiled.kernel_sources().items():
            console.print(f"[bold]kernel {kernel}[/bold]")
            print(source)
        outputs = compiled(*inputs)
        for got, want in zip(*((outputs, expected) if isinstance(expected, tuple) else ((outputs,), (expected,)))):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5 * np.abs(want.numpy()).max())
        timed = seconds_per_call(compiled, inputs)
        shapes = ", ".join("x".join(map(str, t.shape)) for t in inputs)
        table.add_row(title, shapes, name, show(eager), show(timed), f"{eager / timed:.1f}x")


def main():
    console = Console()
    rng = np.random.default_rng(0)
    table = Table("model", "inputs", "backend", "eager", "compiled", "speed-up", title="time per call")
    for size in (5, 1_000_000):
        x = fxkit.from_numpy((rng.random(size) * 0.02 + 0.99).astype(np.float32))
        compile_and_time(console, "x = x * x (x10)", square_ten_times, (x,), table)
    fxkit.manual_seed(0)
    cell = fxkit.models.LSTMCell(128, 256).eval()
    shapes = ((32, 128), (32, 256), (32, 256))
    inputs = tuple(fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes)
    compile_and_time(console, "LSTM cell", cell, inputs, table)
    console.print(table)


if __name__ == "__main__":
    main()
