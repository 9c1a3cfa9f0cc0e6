"""Compiled kernels against numpy, fxkit eager, PyTorch eager and torch.compile, in one run.

    python benchmarks/compiled_kernels.py            # full run (a few minutes: torch.compile compiles)
    python benchmarks/compiled_kernels.py --quick    # fewer repeats, no torch.compile

Figures (issue 5):
- the seed's chain ``x = x * x`` ten times, float32, at 5, 1e4, 1e6 and 16e6 elements:
  fxkit numba vs numpy vs PyTorch eager vs torch.compile, with the machine's copy
  bandwidth measured in the same run, single-threaded (np.copyto) and on every core
  (a numba prange copy) (targets: at 16e6 the numba kernel moves its 128 MB at >= 70%
  of the faster copy; at 5 elements a compiled call, guards
  included, takes <= 5 µs);
- softmax and LayerNorm over (4096, 1024): numba >= 2x numpy, within 1.5x of torch.compile;
- ResNet-18 (8x3x64x64) and the Transformer block (8x32x128) end to end: compiled
  (numpy and numba backends) vs fxkit eager vs PyTorch eager;
- on a GPU (when cupy sees one; the peer reports why not otherwise): the chain at 64M
  float32 elements compiled with the cupy backend (one generated kernel) vs unfused cupy
  (ten kernels), against the device's copy bandwidth measured in the same run (target:
  >= 80% of it), and softmax / LayerNorm rows compiled vs fxkit eager on cupy.

Every peer runs in a process of its own (numpy and fxkit eager, fxkit+numba, PyTorch,
torch.compile): numba's and PyTorch's thread pools would compete for the cores. Times
are the best of several repeats (the least disturbed by other load on the machine).
"""
import argparse
import json
import os
import subprocess
import sys
import timeit

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = (5, 10_000, 1_000_000, 16_000_000)
ROWS = (4096, 1024)
MODELS = {"resnet18": (8, 3, 64, 64), "transformer_block": (8, 32, 128)}
PEERS = ("numpy", "numba", "torch", "torch.compile", "cupy")


def best(fn, quick, budget=0.5):
    """Best seconds per call of ``fn`` (after a warm-up call) over a few timed rounds."""
    fn()
    once = timeit.timeit(fn, number=1)
    number = max(1, int(0.02 / max(once, 1e-9)))
    rounds = 3 if quick else max(3, min(15, int(budget / max(once * number, 1e-9))))
    return min(timeit.repeat(fn, number=number, repeat=rounds)) / number


def chain(x):
    """The seed talk's loop."""
    for _ in range(10):
        x = x * x
    return x


def chain_input(n):
    return (np.random.default_rng(0).random(n) * 0.02 + 0.99).astype(np.float32)


def rows_input():
    return np.random.default_rng(1).standard_normal(ROWS).astype(np.float32)


def copy_bandwidth(quick):
    """Bytes per second of ``np.copyto`` between two preallocated 64 MB arrays (read + write)."""
    src = chain_input(SIZES[-1])
    dst = np.empty_like(src)
    return 2 * src.nbytes / best(lambda: np.copyto(dst, src), quick)


def parallel_copy_function():
    """``dst[:] = src`` on numba's thread pool: the copy bandwidth of all cores (np.copyto uses one)."""
    import numba

    @numba.njit(parallel=True)
    def parallel_copy(dst, src):
        for i in numba.prange(src.shape[0]):
            dst[i] = src[i]

    return parallel_copy


# -- peers -----------------------------------------------------------------------------------------
def bench_numpy(quick):
    """Raw numpy, fxkit eager and fxkit compiled with the numpy backend."""
    import fxkit
    import fxkit.models
    from fxkit import ops

    res = {"copy GB/s": copy_bandwidth(quick) / 1e9}
    for n in SIZES:
        x = chain_input(n)
        res[f"chain {n} numpy"] = best(lambda: chain(x), quick)
        t = fxkit.from_numpy(x)
        res[f"chain {n} fxkit eager"] = best(lambda: chain(t), quick)
    x = rows_input()
    w, b = np.ones(ROWS[1], np.float32), np.zeros(ROWS[1], np.float32)

    def softmax(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def layer_norm(v):
        centred = v - v.mean(-1, keepdims=True)
        return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * w + b

    res["softmax numpy"] = best(lambda: softmax(x), quick)
    res["layer_norm numpy"] = best(lambda: layer_norm(x), quick)
    t, tw, tb = fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(b)
    res["softmax fxkit eager"] = best(lambda: ops.softmax(t, dim=-1), quick)
    res["layer_norm fxkit eager"] = best(lambda: ops.layer_norm(t, (ROWS[1],), tw, tb), quick)
    for name, shape in MODELS.items():
        fxkit.manual_seed(0)
        model, _ = fxkit.models.get(name)
        inp = fxkit.from_numpy(np.random.default_rng(2).standard_normal(shape).astype(np.float32))
        res[f"{name} fxkit eager"] = best(lambda: model(inp), quick, 2.0)
        compiled = fxkit.compile(model, backend="numpy", example_inputs=[inp])
        res[f"{name} compiled numpy"] = best(lambda: compiled(inp), quick, 2.0)
    return res


def bench_numba(quick):
    """fxkit compiled with the numba backend (kernels compiled before timing)."""
    import fxkit
    import fxkit.models
    from fxkit import nn, ops

    res = {}
    for n in SIZES:
        t = fxkit.from_numpy(chain_input(n))
        compiled = fxkit.compile(chain, backend="numba", example_inputs=[t])
        res[f"chain {n} numba"] = best(lambda: compiled(t), quick)
    # NOTE: the copy is timed on the kernel's own input, right after it: 64 MB arrays run 20-30% faster or
    # slower from one allocation to the next here (huge pages or not), so only this pairing compares.
    src, dst = t.numpy(), np.empty_like(t.numpy())
    res["copy GB/s"] = 2 * src.nbytes / best(lambda: np.copyto(dst, src), quick) / 1e9
    parallel_copy = parallel_copy_function()
    res["parallel copy GB/s"] = 2 * src.nbytes / best(lambda: parallel_copy(dst, src), quick) / 1e9
    t = fxkit.from_numpy(rows_input())
    softmax = fxkit.compile(lambda v: ops.softmax(v, dim=-1), backend="numba", example_inputs=[t])
    res["softmax numba"] = best(lambda: softmax(t), quick)
    norm = fxkit.compile(nn.LayerNorm(ROWS[1]).eval(), backend="numba", example_inputs=[t])
    res["layer_norm numba"] = best(lambda: norm(t), quick)
    for name, shape in MODELS.items():
        fxkit.manual_seed(0)
        model, _ = fxkit.models.get(name)
        inp = fxkit.from_numpy(np.random.default_rng(2).standard_normal(shape).astype(np.float32))
        compiled = fxkit.compile(model, backend="numba", example_inputs=[inp])
        res[f"{name} compiled numba"] = best(lambda: compiled(inp), quick, 2.0)
    return res


def bench_torch(quick, compiled):
    """PyTorch eager, or torch.compile (inductor) when ``compiled``."""
    import torch

    from tests.models import torch_reference

    torch.set_num_threads(os.cpu_count())
    wrap = torch.compile if compiled else (lambda f: f)
    label = "torch.compile" if compiled else "torch"
    res = {}
    with torch.no_grad():
        for n in SIZES:
            x = torch.from_numpy(chain_input(n))
            fn = wrap(chain)
            res[f"chain {n} {label}"] = best(lambda: fn(x), quick)
        x = torch.from_numpy(rows_input())
        softmax = wrap(lambda v: torch.softmax(v, dim=-1))
        res[f"softmax {label}"] = best(lambda: softmax(x), quick)
        norm = wrap(torch.nn.LayerNorm(ROWS[1]).eval())
        res[f"layer_norm {label}"] = best(lambda: norm(x), quick)
        if not compiled:
            models = {"resnet18": torch_reference.resnet18(), "transformer_block": torch_reference.TransformerBlock()}
            for name, model in models.items():
                inp = torch.from_numpy(np.random.default_rng(2).standard_normal(MODELS[name]).astype(np.float32))
                model = model.eval()
                res[f"{name} {label}"] = best(lambda: model(inp), quick, 2.0)
    return res


def run_peer(name, quick):
    """Run one peer in a child process; its figures, or None and why it failed."""
    cmd = [sys.executable, os.path.abspath(__file__), "--peer", name] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return None, tail[0]
    return json.loads(out.stdout.strip().splitlines()[-1]), None


# -- report ----------------------------------------------------------------------------------------
def show(seconds):
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def report(res, notes):
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    # NOTE: the kernel's bandwidth is compared with the copy of its own input in its own process; the
    # numpy process's copy is printed beside it (the machine is shared and noisy).
    copies = [res.get(k) for k in ("copy GB/s (numba process)", "parallel copy GB/s")]
    copy = max((c for c in copies if c), default=None) or res.get("copy GB/s")
    table = Table(title="x = x * x ten times, float32 (time per call; compiled calls include guards)")
    for col in ("elements", "numpy", "fxkit eager", "numba", "torch", "torch.compile", "numba vs numpy",
                "numba vs torch.compile", "numba GB/s"):
        table.add_column(col, justify="right")
    for n in SIZES:
        get = {p: res.get(f"chain {n} {p}") for p in ("numpy", "fxkit eager", "numba", "torch", "torch.compile")}
        numba = get["numba"]
        rate = 2 * 4 * n / numba / 1e9 if numba else None
        table.add_row(f"{n:,}", *(show(get[p]) for p in get),
                      f"{get['numpy'] / numba:.1f}x" if numba and get["numpy"] else "-",
                      f"{get['torch.compile'] / numba:.2f}x" if numba and get["torch.compile"] else "-",
                      f"{rate:.1f} ({rate / copy:.0%} of copy)" if rate and copy and n == SIZES[-1] else
                      (f"{rate:.1f}" if rate else "-"))
    console.print(table)
    if copy:
        nan = float("nan")
        console.print(f"copy bandwidth (64 MB, read + write), in the numba process: np.copyto "
                      f"{res.get('copy GB/s (numba process)', nan):.1f} GB/s, parallel numba copy "
                      f"{res.get('parallel copy GB/s', nan):.1f} GB/s; in the numpy one: np.copyto "
                      f"{res.get('copy GB/s', nan):.1f} GB/s. The kernel is set against the faster copy of its "
                      f"own process; targets: 16e6 elements >= 70% of it, 5 elements <= 5 µs a compiled call")
    table = Table(title=f"rows of {ROWS[0]}x{ROWS[1]} float32")
    for col in ("op", "numpy", "fxkit eager", "numba", "torch", "torch.compile", "numba vs numpy (>= 2x)",
                "numba / torch.compile (<= 1.5)"):
        table.add_column(col, justify="right")
    for op in ("softmax", "layer_norm"):
        get = {p: res.get(f"{op} {p}") for p in ("numpy", "fxkit eager", "numba", "torch", "torch.compile")}
        numba = get["numba"]
        table.add_row(op, *(show(get[p]) for p in get),
                      f"{get['numpy'] / numba:.1f}x" if numba and get["numpy"] else "-",
                      f"{numba / get['torch.compile']:.2f}" if numba and get["torch.compile"] else "-")
    console.print(table)
    table = Table(title="models end to end (batch as shown)")
    for col in ("model", "fxkit eager", "compiled numpy", "compiled numba", "torch", "eager / numba",
                "numba / torch"):
        table.add_column(col, justify="right")
    for name, shape in MODELS.items():
        get = {p: res.get(f"{name} {p}") for p in ("fxkit eager", "compiled numpy", "compiled numba", "torch")}
        numba = get["compiled numba"]
        table.add_row(f"{name} {'x'.join(map(str, shape))}", *(show(get[p]) for p in get),
                      f"{get['fxkit eager'] / numba:.2f}x" if numba and get["fxkit eager"] else "-",
                      f"{numba / get['torch']:.2f}" if numba and get["torch"] else "-")
    console.print(table)
    for peer, note in notes.items():
        console.print(f"[yellow]{peer} did not run: {note}[/yellow]")


# -- GPU: the cupy backend ------------------------------------------------------------------------
GPU_CHAIN = 64 * 2**20
"""Elements of the chain on the GPU (256 MB of float32: far beyond any cache)."""


def gpu_best(fn, quick):
    """Best seconds per call of ``fn`` on the GPU, timed with CUDA events around 10 calls a round."""
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(3 if quick else 10):
        start.record()
        for _ in range(10):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3 / 10)
    return min(times)


def bench_cupy(quick):
    """fxkit compiled with the cupy backend vs unfused cupy and fxkit eager on the GPU."""
    import fxkit
    from fxkit import nn, ops

    if not fxkit.cuda.is_available():
        raise SystemExit("no GPU: fxkit.cuda.is_available() is False (needs cupy and a CUDA device)")
    import cupy

    x = cupy.asarray(chain_input(GPU_CHAIN))
    dst = cupy.empty_like(x)
    res = {"gpu copy GB/s": 2 * x.nbytes / gpu_best(lambda: cupy.copyto(dst, x), quick) / 1e9}
    res["gpu chain cupy"] = gpu_best(lambda: chain(x), quick)
    t = fxkit.from_numpy(chain_input(GPU_CHAIN)).to("cuda")
    res["gpu chain fxkit eager"] = gpu_best(lambda: chain(t), quick)
    compiled = fxkit.compile(chain, backend="cupy", example_inputs=[t])
    res["gpu chain fxkit cupy"] = gpu_best(lambda: compiled(t), quick)
    rows = fxkit.from_numpy(rows_input()).to("cuda")
    softmax = fxkit.compile(lambda v: ops.softmax(v, dim=-1), backend="cupy", example_inputs=[rows])
    norm = nn.LayerNorm(ROWS[1]).eval().to("cuda")
    compiled_norm = fxkit.compile(norm, backend="cupy", example_inputs=[rows])
    res["gpu softmax fxkit eager"] = gpu_best(lambda: ops.softmax(rows, dim=-1), quick)
    res["gpu softmax fxkit cupy"] = gpu_best(lambda: softmax(rows), quick)
    res["gpu layer_norm fxkit eager"] = gpu_best(lambda: norm(rows), quick)
    res["gpu layer_norm fxkit cupy"] = gpu_best(lambda: compiled_norm(rows), quick)
    return res


def report_gpu(res):
    """The GPU tables, when the cupy peer ran."""
    from rich.console import Console
    from rich.table import Table

    copy = res.get("gpu copy GB/s")
    if copy is None:
        return
    console = Console()
    fused, unfused = res["gpu chain fxkit cupy"], res["gpu chain cupy"]
    rate = 2 * 4 * GPU_CHAIN / fused / 1e9
    table = Table(title=f"GPU: x = x * x ten times, {GPU_CHAIN:,} float32 elements")
    for col in ("copy GB/s", "fxkit cupy (fused)", "GB/s (>= 80% of copy)", "cupy (unfused)", "fxkit eager",
                "fused vs unfused"):
        table.add_column(col, justify="right")
    table.add_row(f"{copy:.0f}", show(fused), f"{rate:.0f} ({rate / copy:.0%})", show(unfused),
                  show(res["gpu chain fxkit eager"]), f"{unfused / fused:.1f}x")
    console.print(table)
    table = Table(title=f"GPU rows of {ROWS[0]}x{ROWS[1]} float32")
    for col in ("op", "fxkit eager (cupy)", "fxkit cupy (one kernel)", "speedup"):
        table.add_column(col, justify="right")
    for op in ("softmax", "layer_norm"):
        eager, kernel = res[f"gpu {op} fxkit eager"], res[f"gpu {op} fxkit cupy"]
        table.add_row(op, show(eager), show(kernel), f"{eager / kernel:.1f}x")
    console.print(table)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no torch.compile")
    parser.add_argument("--peer", choices=PEERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        bench = {"numpy": bench_numpy, "numba": bench_numba,
                 "torch": lambda q: bench_torch(q, compiled=False),
                 "torch.compile": lambda q: bench_torch(q, compiled=True), "cupy": bench_cupy}[args.peer]
        print(json.dumps(bench(args.quick)))
        return
    res, notes = {}, {}
    for peer in PEERS:
        if peer == "torch.compile" and args.quick:
            continue
        figures, note = run_peer(peer, args.quick)
        if figures is None:
            notes[peer] = note
            continue
        if peer == "numba":
            figures["copy GB/s (numba process)"] = figures.pop("copy GB/s")
        res.update(figures)
    report(res, notes)
    report_gpu(res)


if __name__ == "__main__":
    main()
