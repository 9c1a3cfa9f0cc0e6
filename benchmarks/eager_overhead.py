"""Eager-mode cost of fxkit against raw numpy and PyTorch eager, in one run.

    python benchmarks/eager_overhead.py            # full run
    python benchmarks/eager_overhead.py --quick    # fewer repeats

Figures (issue 2):
- per-op overhead on tiny tensors: fxkit's time minus raw numpy's, against PyTorch eager's
  per-op time (target: overhead <= 1.0x PyTorch's time, and fxkit under 3 us per op);
- large tensors: fxkit / raw numpy (target <= 1.10: no hidden copies or float64 detours);
- ResNet-18 forward (batch 8, 3x64x64): fxkit eager / PyTorch eager (reported).

PyTorch runs in a child process of its own so its thread pool never competes with numpy's BLAS.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TINY = ["add", "relu", "matmul 4x4", "sum"]
LARGE = ["add 16M", "matmul 2048", "resnet18 conv 64x64x3x3 @56x56 b8"]


def per_call(fn, min_time=0.2, repeats=7):
    """Median seconds per call over ``repeats`` rounds of at least ``min_time`` each."""
    fn()
    number = 1
    while True:
        t = timeit.timeit(fn, number=number)
        if t >= min_time / 5:
            break
        number *= 4
    number = max(1, int(number * (min_time / 5) / max(t, 1e-9)))
    times = [timeit.timeit(fn, number=number) / number for _ in range(repeats)]
    return statistics.median(times)


def _inputs(rng):
    return {
        "tiny": (rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)),
        "big": (rng.standard_normal(16_000_000).astype(np.float32), rng.standard_normal(16_000_000).astype(np.float32)),
        "mm": (rng.standard_normal((2048, 2048)).astype(np.float32), rng.standard_normal((2048, 2048)).astype(np.float32)),
        "conv": (rng.standard_normal((8, 64, 56, 56)).astype(np.float32),
                 rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05),
    }


def bench_numpy_and_fxkit(quick):
    import fxkit
    import fxkit.models

    rng = np.random.default_rng(0)
    data = _inputs(rng)
    a, b = data["tiny"]
    x, y = fxkit.from_numpy(a), fxkit.from_numpy(b)
    mt = 0.05 if quick else 0.2
    res = {"numpy": {}, "fxkit": {}}
    res["numpy"]["add"] = per_call(lambda: np.add(a, b), mt)
    res["fxkit"]["add"] = per_call(lambda: x + y, mt)
    res["numpy"]["relu"] = per_call(lambda: np.maximum(a, 0), mt)
    res["fxkit"]["relu"] = per_call(lambda: x.relu(), mt)
    res["numpy"]["matmul 4x4"] = per_call(lambda: np.matmul(a, b), mt)
    res["fxkit"]["matmul 4x4"] = per_call(lambda: x @ y, mt)
    res["numpy"]["sum"] = per_call(lambda: np.sum(a), mt)
    res["fxkit"]["sum"] = per_call(lambda: x.sum(), mt)

    ba, bb = data["big"]
    bx, by = fxkit.from_numpy(ba), fxkit.from_numpy(bb)
    res["numpy"]["add 16M"] = per_call(lambda: np.add(ba, bb), mt, 5)
    res["fxkit"]["add 16M"] = per_call(lambda: bx + by, mt, 5)
    ma, mb = data["mm"]
    mx, my = fxkit.from_numpy(ma), fxkit.from_numpy(mb)
    res["numpy"]["matmul 2048"] = per_call(lambda: np.matmul(ma, mb), mt, 5)
    res["fxkit"]["matmul 2048"] = per_call(lambda: mx @ my, mt, 5)
    ci, cw = data["conv"]
    cx, cwt = fxkit.from_numpy(ci), fxkit.from_numpy(cw)
    conv = fxkit.ops.conv2d
    # raw numpy: the same BLAS-backed formulation called on ndarrays, with no Tensor in between
    res["numpy"][LARGE[2]] = per_call(lambda: conv.impl(np, ci, cw, None, 1, 1), mt, 5)
    res["fxkit"][LARGE[2]] = per_call(lambda: conv(cx, cwt, None, 1, 1), mt, 5)

    model = fxkit.models.resnet18().eval()
    inp = fxkit.from_numpy(rng.standard_normal((8, 3, 64, 64)).astype(np.float32))
    with fxkit.no_grad():  # as torch.no_grad() on the PyTorch side: inference, no graph recorded
        res["fxkit"]["resnet18 b8"] = per_call(lambda: model(inp), mt * 2, 5)
    return res


def bench_torch(quick):
    import torch

    from tests.models.torch_reference import resnet18 as torch_resnet18

    torch.set_num_threads(os.cpu_count())
    rng = np.random.default_rng(0)
    data = _inputs(rng)
    mt = 0.05 if quick else 0.2
    a, b = (torch.from_numpy(v) for v in data["tiny"])
    res = {}
    with torch.no_grad():
        res["add"] = per_call(lambda: a + b, mt)
        res["relu"] = per_call(lambda: a.relu(), mt)
        res["matmul 4x4"] = per_call(lambda: a @ b, mt)
        res["sum"] = per_call(lambda: a.sum(), mt)
        ba, bb = (torch.from_numpy(v) for v in data["big"])
        res["add 16M"] = per_call(lambda: ba + bb, mt, 5)
        ma, mb = (torch.from_numpy(v) for v in data["mm"])
        res["matmul 2048"] = per_call(lambda: ma @ mb, mt, 5)
        ci, cw = (torch.from_numpy(v) for v in data["conv"])
        res[LARGE[2]] = per_call(lambda: torch.nn.functional.conv2d(ci, cw, None, 1, 1), mt, 5)
        model = torch_resnet18().eval()
        inp = torch.from_numpy(rng.standard_normal((8, 3, 64, 64)).astype(np.float32))
        res["resnet18 b8"] = per_call(lambda: model(inp), mt * 2, 5)
    return res


def _torch_in_child(quick):
    cmd = [sys.executable, os.path.abspath(__file__), "--peer-torch"] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return None, tail[0]
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def report(res, torch_res, torch_note):
    from rich.console import Console
    from rich.table import Table

    us = 1e6
    table = Table(title="Per-op overhead, tiny tensors (4x4 float32)")
    for col in ("op", "numpy µs", "fxkit µs", "fxkit overhead µs", "torch µs", "overhead / torch", "target"):
        table.add_column(col, justify="right" if col != "op" else "left")
    for name in TINY:
        n, f = res["numpy"][name] * us, res["fxkit"][name] * us
        t = torch_res[name] * us if torch_res else None
        over = f - n
        table.add_row(name, f"{n:.2f}", f"{f:.2f}", f"{over:.2f}", f"{t:.2f}" if t else "-",
                      f"{over / t:.2f}x" if t else "-", "≤1.0x and fxkit <3 µs")
    Console().print(table)

    table = Table(title="Large tensors")
    for col in ("case", "numpy ms", "fxkit ms", "fxkit / numpy", "torch ms", "target"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for name in LARGE:
        n, f = res["numpy"][name] * 1e3, res["fxkit"][name] * 1e3
        t = torch_res[name] * 1e3 if torch_res else None
        table.add_row(name, f"{n:.2f}", f"{f:.2f}", f"{f / n:.3f}", f"{t:.2f}" if t else "-", "≤1.10")
    Console().print(table)

    f = res["fxkit"]["resnet18 b8"] * 1e3
    if torch_res:
        t = torch_res["resnet18 b8"] * 1e3
        Console().print(f"ResNet-18 forward, batch 8, 3x64x64: fxkit eager {f:.1f} ms, PyTorch eager {t:.1f} ms, "
                        f"ratio fxkit/torch = {f / t:.2f}")
    else:
        Console().print(f"ResNet-18 forward, batch 8, 3x64x64: fxkit eager {f:.1f} ms; PyTorch: {torch_note}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter repeats")
    parser.add_argument("--peer-torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_torch:
        print(json.dumps(bench_torch(args.quick)))
        return
    res = bench_numpy_and_fxkit(args.quick)
    torch_res, note = _torch_in_child(args.quick)
    report(res, torch_res, note)


if __name__ == "__main__":
    main()
