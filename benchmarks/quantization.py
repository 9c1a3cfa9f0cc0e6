"""Quantization figures of issue 7 in one run: accuracy and file size of the digits models, and
CPU latency of the int8 kernels against float32.

    python benchmarks/quantization.py            # full run
    python benchmarks/quantization.py --quick    # fewer timing rounds, no QAT

Figures and targets:
- Test accuracy (scikit-learn digits, last quarter) of the MLP with scikit-learn's weights and of
  DigitsNet: float32, post-training int8 per-tensor and per-channel (target: within 1 point of
  float32), and int8 after 3 epochs of quantization-aware fine-tuning from the PTQ ranges
  (target: no lower than PTQ). File sizes of ``fxkit.save``: int8 / float32 (target <= 0.3).
- Latency of one int8 layer (int8 in, int8 out: what runs between two quantized layers) on the
  numba engine and the numpy reference engine, against fxkit's float32 layer (BLAS); PyTorch's
  float32 and fbgemm int8 layers alongside when PyTorch is installed. Reported, no target.
- Issue 19's targets (`ratio_table`): at resnet18's and BERT's shapes, fxkit's float32 layer
  (conv/linear + bias + ReLU) over its int8 layer on the numba engine (target >= 1.3), and
  resnet18 (fxkit.models, batch 8 at 64x64) end to end, float32 GraphModule over its
  per-channel int8 conversion (target > 1). Contenders take turns call by call and each
  keeps its median of the rounds; the load average is printed with the table.

Each contender of the latency table is timed in its own block of rounds and keeps its best
round (the least disturbed by other processes on a shared machine).
"""
import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "recipes"))

import fxkit  # noqa: E402
import fxkit.backends  # noqa: E402,F401  (registers the numba integer engine)
from fxkit.nn import functional as F  # noqa: E402
from fxkit.runtime.ops.quantized_ops import quantize_multiplier, use_quantized_engine  # noqa: E402
from fxkit.transforms.quantize import (calibrate, convert, default_qconfig, enable_observer,  # noqa: E402
                                       per_channel_qconfig, prepare, prepare_qat)
from quantize_digits import IMAGE, accuracy, digits_split, mlp_from_sklearn, saved_size, train_digits_net  # noqa: E402


def qat_from_ptq(model, train_x, train_y, shape, batches, loss_fn, epochs=3):
    """Fake-quantized fine-tuning starting from the post-training ranges; returns the int8 model."""
    qat = prepare_qat(model)
    calibrate(qat, batches, progress=False)
    optimizer = fxkit.optim.SGD(qat.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    for epoch in range(epochs):
        order = rng.permutation(len(train_x))
        for i in range(0, len(order), 32):
            batch = order[i:i + 32]
            loss = loss_fn(qat(fxkit.from_numpy(train_x[batch].reshape(shape))), fxkit.from_numpy(train_y[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch == epochs - 2:
            enable_observer(qat, False)
    return convert(qat.eval(), report=False)


def accuracy_table(console, with_qat):
    train_x, train_y, test_x, test_y = digits_split()
    models = [("MLP (sklearn weights)", mlp_from_sklearn(train_x, train_y), (-1, 64), F.cross_entropy),
              ("DigitsNet (CNN)", train_digits_net(train_x, train_y, 8, console), IMAGE, F.nll_loss)]
    table = Table("model", "fp32", "PTQ per-tensor", "PTQ per-channel", "QAT per-tensor (3 epochs)", "fp32 file",
                  "int8 file / fp32",
                  title=f"digits test accuracy ({len(test_y)} images by unseen writers) and fxkit.save sizes")
    # NOTE: a TemporaryDirectory is removed when it is collected or the interpreter exits, even on an error
    scratch = tempfile.TemporaryDirectory(prefix="fxkit-bench-quantization-")
    folder = scratch.name
    for name, model, shape, loss_fn in models:
        batches = [fxkit.from_numpy(train_x[i:i + 64].reshape(shape)) for i in range(0, len(train_x), 64)]
        quantized = {}
        for label, qconfig in (("per-tensor", default_qconfig), ("per-channel", per_channel_qconfig)):
            prepared = prepare(model, qconfig)
            calibrate(prepared, batches, progress=False)
            quantized[label] = convert(prepared, report=False)
        qat = (f"{accuracy(qat_from_ptq(model, train_x, train_y, shape, batches, loss_fn), test_x, test_y, shape):.2f}%"
               if with_qat else "-")
        fp32 = saved_size(fxkit.symbolic_trace(model), folder, "fp32")
        sizes = [saved_size(quantized[label], folder, label) / fp32 for label in ("per-tensor", "per-channel")]
        table.add_row(name, f"{accuracy(model, test_x, test_y, shape):.2f}%",
                      *(f"{accuracy(quantized[k], test_x, test_y, shape):.2f}%" for k in ("per-tensor", "per-channel")),
                      qat, f"{fp32 / 1024:.1f} KiB", f"{sizes[0]:.3f} / {sizes[1]:.3f}")
    console.print(table)
    scratch.cleanup()


def best_of(fns, rounds):
    """Best seconds of each function over ``rounds`` calls, one function after the other.

    NOTE: not interleaved: BLAS, numba and PyTorch each keep worker threads spinning for a
    while after a call, and on a small machine those steal the cores from the next library.
    """
    best = []
    for fn in fns:
        fn()
        time.sleep(0.2)  # let the previous library's threads go to sleep
        fn()
        kept = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - start)
        best.append(min(kept))
    return best


def _int8_layer(rng, kind, x_shape, w_shape, conv):
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    bias = rng.integers(-5000, 5000, w_shape[0]).astype(np.int32)
    multiplier, shift = quantize_multiplier(rng.uniform(1e-4, 1e-3, w_shape[0]))
    args = (fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), 3, 0, fxkit.from_numpy(multiplier),
            fxkit.from_numpy(shift), -5)
    op = fxkit.quantized_conv2d if kind == "conv2d" else fxkit.quantized_linear
    return lambda: op(*args, **conv, relu=True)


def _torch_layers(rng, kind, x_shape, w_shape, conv, threads):
    """PyTorch's float32 and fbgemm int8 layers of the same shape, or (None, None)."""
    try:
        import torch
        import torch.ao.nn.quantized as nnq
    except ImportError:
        return None, None
    torch.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.from_numpy(rng.standard_normal(x_shape).astype(np.float32))
        w = torch.from_numpy(rng.standard_normal(w_shape).astype(np.float32))
        qw = torch.quantize_per_channel(w, torch.full((w_shape[0],), 0.02, dtype=torch.float64),
                                        torch.zeros(w_shape[0], dtype=torch.int64), 0, torch.qint8)
        qx = torch.quantize_per_tensor(x, 0.05, 64, torch.quint8)
        if kind == "conv2d":
            layer = nnq.Conv2d(w_shape[1], w_shape[0], w_shape[2:], padding=conv["padding"])
            fp32 = lambda: torch.nn.functional.conv2d(x, w, padding=conv["padding"])  # noqa: E731
        else:
            layer = nnq.Linear(w_shape[1], w_shape[0])
            fp32 = lambda: torch.nn.functional.linear(x, w)  # noqa: E731
        layer.set_weight_bias(qw, None)
        layer.scale, layer.zero_point = 0.1, 64

    def int8():
        with torch.no_grad():
            return layer(qx)

    def float32():
        with torch.no_grad():
            return fp32()

    return float32, int8


def latency_table(console, rounds, threads):
    """One layer's latency with every library limited to ``threads`` threads."""
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(threads)
    with threadpool_limits(threads):
        _latency_rows(console, rounds, threads)


def _latency_rows(console, rounds, threads):
    rng = np.random.default_rng(0)
    cases = [
        ("linear", "DigitsNet fc1, batch 64", (64, 256), (128, 256), {}),
        ("linear", "MLP 64-256, batch 450", (450, 64), (256, 64), {}),
        ("linear", "1024x1024, batch 256", (256, 1024), (1024, 1024), {}),
        ("conv2d", "DigitsNet conv2, batch 64", (64, 32, 4, 4), (64, 32, 3, 3), {"padding": 1}),
        ("conv2d", "3x3 64->64 on 28x28, batch 8", (8, 64, 28, 28), (64, 64, 3, 3), {"padding": 1}),
    ]
    table = Table("layer", "fp32 fxkit", "int8 numba", "int8 reference", "numba / fp32", "fp32 torch",
                  "int8 torch fbgemm", title=f"one layer, best of {rounds} (ms), {threads} thread(s) per library")
    for kind, label, x_shape, w_shape, conv in cases:
        xf = fxkit.from_numpy(rng.standard_normal(x_shape).astype(np.float32))
        wf = fxkit.from_numpy(rng.standard_normal(w_shape).astype(np.float32))
        bf = fxkit.from_numpy(rng.standard_normal(w_shape[0]).astype(np.float32))
        float_layer = ((lambda: F.relu(F.conv2d(xf, wf, bf, **conv))) if kind == "conv2d"
                       else (lambda: F.relu(F.linear(xf, wf, bf))))
        int8_layer = _int8_layer(rng, kind, x_shape, w_shape, conv)

        def numba_layer():
            with use_quantized_engine("numba"):
                return int8_layer()

        torch_fp32, torch_int8 = _torch_layers(rng, kind, x_shape, w_shape, conv, threads)
        fns = [float_layer, numba_layer, int8_layer] + [f for f in (torch_fp32, torch_int8) if f is not None]
        times = best_of(fns, rounds)
        ms = [f"{t * 1e3:.3f}" for t in times]
        table.add_row(f"{kind} {label}", ms[0], ms[1], ms[2], f"{times[1] / times[0]:.2f}x",
                      *(ms[3:5] if len(ms) > 3 else ["-", "-"]))
    console.print(table)


def interleaved_medians(fns, rounds):
    """``[(wall, cpu)]``: median wall-clock and process CPU seconds of each function, the functions
    taking turns round by round (so load from other processes hits them alike).

    NOTE: CPU time (every thread of the process, spin-waiting included) is printed beside wall time:
    on a machine loaded far beyond its cores, wall time mostly measures the scheduler."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, kept in zip(fns, times):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            kept.append((time.perf_counter() - wall, time.process_time() - cpu))
    return [tuple(float(v) for v in np.median(np.array(kept), axis=0)) for kept in times]


def _resnet18_pair(rng):
    """resnet18 (batch 8, 3x64x64) as a float32 GraphModule and its per-channel int8 conversion."""
    model, shapes = fxkit.models.get("resnet18")
    model.eval()
    x = fxkit.from_numpy(rng.standard_normal(shapes[0]).astype(np.float32))
    prepared = prepare(model, per_channel_qconfig)
    calibrate(prepared, [x], progress=False)
    traced = fxkit.symbolic_trace(model)
    return (lambda: traced(x)), convert(prepared, report=False), x


def ratio_table(console, rounds, threads):
    """Issue 19's int8-over-float32 ratios, ``threads`` threads for every library."""
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(threads)
    rng = np.random.default_rng(0)
    cases = [
        ("conv2d", "resnet18 3x3 64->64 @56x56, batch 8", (8, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}),
        ("conv2d", "resnet18 3x3 256->256 @14x14, batch 8", (8, 256, 14, 14), (256, 256, 3, 3), {"padding": 1}),
        ("linear", "resnet18 fc 512->1000, batch 8", (8, 512), (1000, 512), {}),
        ("linear", "BERT 768->768, 128 tokens", (128, 768), (768, 768), {}),
        ("linear", "BERT 768->3072, 128 tokens", (128, 768), (3072, 768), {}),
    ]
    table = Table("layer", "fp32 fxkit wall (ms)", "int8 numba wall (ms)", "fp32 / int8 wall (target >= 1.3)",
                  "fp32 / int8 CPU time",
                  title=f"int8 numba engine vs fxkit float32, median of {rounds} interleaved rounds, "
                        f"{threads} thread(s)")
    with threadpool_limits(threads), use_quantized_engine("numba"):
        for kind, label, x_shape, w_shape, conv in cases:
            xf = fxkit.from_numpy(rng.standard_normal(x_shape).astype(np.float32))
            wf = fxkit.from_numpy(rng.standard_normal(w_shape).astype(np.float32))
            bf = fxkit.from_numpy(rng.standard_normal(w_shape[0]).astype(np.float32))
            float_layer = ((lambda: F.relu(F.conv2d(xf, wf, bf, **conv))) if kind == "conv2d"
                           else (lambda: F.relu(F.linear(xf, wf, bf))))
            fp32, int8 = interleaved_medians([float_layer, _int8_layer(rng, kind, x_shape, w_shape, conv)], rounds)
            table.add_row(f"{kind} {label}", f"{fp32[0] * 1e3:.2f}", f"{int8[0] * 1e3:.2f}",
                          f"{fp32[0] / int8[0]:.2f}x", f"{fp32[1] / int8[1]:.2f}x")
        float_model, int8_model, x = _resnet18_pair(rng)
        fp32, int8 = interleaved_medians([float_model, lambda: int8_model(x)], rounds)
        table.add_row("resnet18 end to end, batch 8 3x64x64 (target > 1)", f"{fp32[0] * 1e3:.2f}",
                      f"{int8[0] * 1e3:.2f}", f"{fp32[0] / int8[0]:.2f}x", f"{fp32[1] / int8[1]:.2f}x")
    console.print(table)
    console.print("load average (1, 5, 15 min): " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per library for the latency table (1: least disturbed on a shared machine)")
    parser.add_argument("--ratio-threads", type=int, default=2, help="threads per library for issue 19's ratios")
    parser.add_argument("--ratios-only", action="store_true", help="only issue 19's int8-over-float32 ratios")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 150))
    ratio_table(console, 9 if args.quick else 15, args.ratio_threads)
    if args.ratios_only:
        return
    latency_table(console, 5 if args.quick else 30, args.threads)
    accuracy_table(console, with_qat=not args.quick)


if __name__ == "__main__":
    main()
