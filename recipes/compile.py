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
    if "numba" in backend_names():
        numba_row_kernels(console, rng, table)
    console.print(table)


# -- numba: row kernels and the kernel cache ---------------------------------------------------
def scaled_softmax(scores, mask):
    """Attention's normalisation: scale, mask, softmax over the last dim."""
    return fxkit.ops.softmax(scores * 0.125 + mask, dim=-1)


def numba_row_kernels(console, rng, table):
    """The numba backend makes a softmax with its elementwise neighbours one kernel (a row kernel:
    a prologue, a reduction over the last axis, an epilogue), and a LayerNorm another; kernels
    are cached on disk, so the next run of this recipe loads them instead of compiling."""
    from fxkit.backends.numba_cache import cache_dir

    scores = fxkit.from_numpy(rng.standard_normal((64, 8, 32, 32)).astype(np.float32))
    mask = fxkit.from_numpy(np.triu(np.full((32, 32), -1e9, np.float32), 1))
    compiled = fxkit.compile(scaled_softmax, backend="numba", example_inputs=(scores, mask))
    console.rule("[bold]scale + mask + softmax: numba backend")
    print(compiled.code)
    for kernel, source in compiled.kernel_sources().items():
        console.print(f"[bold]kernel {kernel}[/bold]")
        print(source)
    np.testing.assert_allclose(compiled(scores, mask).numpy(), scaled_softmax(scores, mask).numpy(),
                               rtol=1e-5, atol=1e-6)
    eager, timed = seconds_per_call(scaled_softmax, (scores, mask)), seconds_per_call(compiled, (scores, mask))
    table.add_row("scale+mask+softmax", "64x8x32x32, 32x32", "numba", show(eager), show(timed),
                  f"{eager / timed:.1f}x")
    norm = fxkit.nn.LayerNorm(1024).eval()
    x = fxkit.from_numpy(rng.standard_normal((4096, 1024)).astype(np.float32))
    compiled = fxkit.compile(norm, backend="numba", example_inputs=(x,))
    np.testing.assert_allclose(compiled(x).numpy(), norm(x).numpy(), rtol=1e-5, atol=1e-5)
    eager, timed = seconds_per_call(norm, (x,)), seconds_per_call(compiled, (x,))
    table.add_row("LayerNorm", "4096x1024", "numba", show(eager), show(timed), f"{eager / timed:.1f}x")
    console.print(f"numba kernels and their compiled code are cached in {cache_dir()}")


if __name__ == "__main__":
    main()
