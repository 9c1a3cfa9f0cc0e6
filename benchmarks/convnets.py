"""Convnets end to end: fxkit eager, compiled numpy, compiled numba and PyTorch eager, interleaved.

    python benchmarks/convnets.py                         # every model, batch 1 and 8, 224x224
    python benchmarks/convnets.py --size 112 --batches 8  # smaller
    python benchmarks/convnets.py --models resnet18 mobilenet_v2 --repeats 9

Models (random weights, eval mode): fxkit's zoo ResNet-18 and ResNet-50
(`fxkit.models`) and torchvision's resnet18, resnet50, mobilenet_v2,
efficientnet_b0 and vgg11 converted with `fxkit.from_torch` (issue 19). All
contenders run in this one process on 2 threads (OMP/OpenBLAS/MKL/numba
threads set before any import, ``torch.set_num_threads(2)``), each in turn per
round (a rest, an untimed warm-up, then timed calls: `interleaved`), so that
load from elsewhere on the machine hits all of them alike; each figure is the
median of ``--repeats`` rounds, printed in ms and as a ratio to PyTorch eager,
with the load average when the model ran. Each contender's output is checked against PyTorch's.

The script uses public APIs only, so it measures another checkout too:
``PYTHONPATH=/path/to/other python benchmarks/convnets.py``.
"""
import argparse
import os
import sys

THREADS = "2"
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = THREADS

import numpy as np  # noqa: E402  (after the thread settings)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)

import fxkit  # noqa: E402
import fxkit.models  # noqa: E402
from interleaved import interleaved_rounds, median_wall  # noqa: E402  (benchmarks/interleaved.py)
from tests.corpus.torchvision_import import import_torchvision  # noqa: E402  (torchvision beside CPU torch)

TORCHVISION = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vgg11")
ZOO = ("zoo_resnet18", "zoo_resnet50")
CONTENDERS = ("eager", "numpy", "numba", "torch")


def torch_model(name):
    """A torchvision classifier with random weights, the same every run (seeded), in eval mode: unseeded
    weights changed the timings from run to run (PyTorch's mobilenet_v2 at batch 8 took 73 ms in one run,
    152 ms in another)."""
    import torch

    torch.manual_seed(0)
    return getattr(import_torchvision().models, name)().eval()


def zoo_pair(name):
    """fxkit's zoo ResNet and a torchvision twin carrying the same weights (when torchvision loads)."""
    model = getattr(fxkit.models, name[len("zoo_"):])().eval()
    reference = torch_model(name[len("zoo_"):])
    reference.load_state_dict({k: __import__("torch").from_numpy(np.array(v.numpy()))
                               for k, v in model.state_dict().items()})
    return model, reference


def contenders(name, x):
    """``{contender: callable of no arguments}`` and the PyTorch output for model ``name`` on ``x``."""
    import torch

    if name in ZOO:
        model, reference = zoo_pair(name)
    else:
        reference = torch_model(name)
        model = fxkit.from_torch(reference, example_inputs=(torch.from_numpy(x),))
    fx_x = fxkit.from_numpy(x)
    t_x = torch.from_numpy(x)
    compiled = {be: fxkit.compile(model, backend=be, example_inputs=[fx_x]) for be in ("numpy", "numba")}

    def run_torch():
        with torch.no_grad():
            return reference(t_x)

    def run_eager():
        with fxkit.no_grad():
            return model(fx_x)

    calls = {"eager": run_eager, "numpy": lambda: compiled["numpy"](fx_x),
             "numba": lambda: compiled["numba"](fx_x), "torch": run_torch}
    return calls, run_torch().numpy()


def measure(calls, repeats):
    """Median seconds per call of each contender over ``repeats`` interleaved rounds (`interleaved`)."""
    return median_wall(interleaved_rounds(calls, repeats))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(ZOO + TORCHVISION))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(THREADS))
    print(f"fxkit from {os.path.dirname(fxkit.__file__)}; {THREADS} threads each; median of {args.repeats}")
    print(f"{'model':<16} {'batch':>5} {'torch ms':>9}  " + "  ".join(f"{c:>7}" for c in CONTENDERS[:-1])
          + "  numba/numpy  max|err|   load")
    for batch in args.batches:
        x = np.random.default_rng(0).standard_normal((batch, 3, args.size, args.size)).astype(np.float32)
        for name in args.models:
            try:
                calls, expected = contenders(name, x)
            except Exception as exc:  # a model fxkit cannot import is reported, not fatal to the table
                print(f"{name:<16} {batch:>5}  skipped: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            scale = float(np.abs(expected).max()) or 1.0
            error = max(float(np.abs(np.asarray(calls[c]().numpy()) - expected).max()) / scale
                        for c in CONTENDERS[:-1])
            seconds = measure(calls, args.repeats)
            load = os.getloadavg()[0]
            ratios = "  ".join(f"{seconds[c] / seconds['torch']:>6.2f}x" for c in CONTENDERS[:-1])
            print(f"{name:<16} {batch:>5} {seconds['torch'] * 1e3:>9.1f}  {ratios}  "
                  f"{seconds['numba'] / seconds['numpy']:>10.2f}x  {error:>8.1e}  {load:>5.1f}", flush=True)


if __name__ == "__main__":
    main()
