"""The numba backend against the numpy backend on every zoo and corpus model (issue 19: numba <= 1.0x).

    python benchmarks/numba_vs_numpy.py                              # zoo and corpus, batch 1 and 8
    python benchmarks/numba_vs_numpy.py --set zoo --repeats 9
    python benchmarks/numba_vs_numpy.py --models resnet50 torchvision/resnet50 --batches 1

For each model and batch: ``fxkit.compile`` with the numpy and with the numba
backend on the same inputs, both checked against each other, then timed in
this one process, each in turn per round (a rest, so one contender's spinning
BLAS or numba workers are idle when the other starts, an untimed warm-up,
then timed calls: `interleaved`), so load from elsewhere on the machine hits
both alike. A row gives
the medians of ``--repeats`` rounds after a warm-up, their ratio
numba/numpy beside the target (1.00; the verdict), the ratio of the two
contenders' fastest rounds (``min nb/np``: on a loaded machine a forward's
median holds scheduler waits of whole time slices, the fastest round the
least of them), and the load average when the row ran. Every contender runs on 2 threads (OpenBLAS, OpenMP, numba; set before
numpy loads).

Models: the zoo (`fxkit.models`, its example shapes with the batch
dimension set) and the corpus (`tests.corpus`, imported with
``fxkit.from_torch`` and a symbolic batch; needs torch, torchvision, timm and
transformers). A model that fails to build, import or compile is a row with
its error, never left out.
"""
import argparse
import os
import statistics
import sys

THREADS = "2"
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = THREADS

import numpy as np  # noqa: E402  (after the thread settings)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
import fxkit.models  # noqa: E402
from interleaved import interleaved_rounds  # noqa: E402  (benchmarks/interleaved.py)

TARGET = 1.0
"""Issue 19: compiled numba at most as slow as compiled numpy."""
SEED = 1


def zoo_inputs(name, batch):
    """``(model, fxkit inputs)`` of a zoo model, its example shapes with the batch dimension set."""
    model, shapes = fxkit.models.get(name)
    rng = np.random.default_rng(SEED)
    return model, [fxkit.from_numpy(rng.standard_normal((batch,) + tuple(s[1:])).astype(np.float32)) for s in shapes]


def corpus_inputs(name, batch, imported):
    """``(imported model, fxkit inputs)`` of a corpus model; the import (symbolic batch) is made once."""
    from tests.corpus import build

    entry = build(name)
    if name not in imported:
        import torch

        dim = torch.export.Dim("N", min=1, max=64)
        dynamic = {n: {d: dim} for n, d in zip(entry.input_names, entry.batch_dims)}
        imported[name] = fxkit.from_torch(entry.model, entry.kwargs(entry.example_inputs), dynamic_shapes=dynamic)
    inputs = [fxkit.from_numpy(x.numpy()) for x in entry.make_inputs(batch, SEED)]
    return imported[name], inputs


def flat_arrays(value):
    """An fxkit output as a flat list of float64 arrays."""
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in flat_arrays(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in flat_arrays(v)]
    return [np.asarray(value.numpy(), np.float64)]


def max_relative_error(actual, expected):
    return max(float(np.max(np.abs(a - e), initial=0.0)) / max(float(np.max(np.abs(e), initial=0.0)), 1e-30)
               for a, e in zip(flat_arrays(actual), flat_arrays(expected)))


def measure(calls, repeats):
    """``{contender: (median, minimum)}`` seconds per call over ``repeats`` interleaved rounds."""
    rounds = interleaved_rounds(calls, repeats)
    return {k: (statistics.median(w for w, _ in v), min(w for w, _ in v)) for k, v in rounds.items()}


def row(name, batch, repeats, imported):
    """One printed line: both backends' milliseconds, numba/numpy beside the target, the load average."""
    try:
        model, inputs = (corpus_inputs(name, batch, imported) if "/" in name else zoo_inputs(name, batch))
        compiled = {be: fxkit.compile(model, backend=be, example_inputs=inputs) for be in ("numpy", "numba")}
        error = max_relative_error(compiled["numba"](*inputs), compiled["numpy"](*inputs))
        seconds = measure({be: (lambda c=c: c(*inputs)) for be, c in compiled.items()}, repeats)
    except Exception as exc:  # noqa: BLE001  (a model that fails is a row with its error)
        text = str(exc).strip().splitlines()
        return f"{name:<36} {batch:>5}  error: {type(exc).__name__}: {text[0][:100] if text else ''}"
    (numpy_s, numpy_min), (numba_s, numba_min) = seconds["numpy"], seconds["numba"]
    ratio = numba_s / numpy_s
    verdict = "ok" if ratio <= TARGET else "MISS"
    return (f"{name:<36} {batch:>5} {numpy_s * 1e3:>9.2f} {numba_s * 1e3:>9.2f} {ratio:>7.2f} {TARGET:>6.2f} "
            f"{verdict:>5} {numba_min / numpy_min:>10.2f} {error:>9.1e} {os.getloadavg()[0]:>5.2f}")


def model_names(chosen, which):
    """The models to run: ``--models`` as given, else the zoo, the corpus or both (``--set``)."""
    if chosen:
        return chosen
    names = []
    if which in ("zoo", "all"):
        names += fxkit.models.names()
    if which in ("corpus", "all"):
        from tests.corpus import NAMES

        names += list(NAMES)
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="zoo names (resnet50) or corpus names (torchvision/resnet50)")
    parser.add_argument("--set", choices=("zoo", "corpus", "all"), default="all")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(int(THREADS))
    except ImportError:
        pass
    print(f"fxkit from {os.path.dirname(fxkit.__file__)}; {THREADS} threads each; median of {args.repeats} "
          f"interleaved rounds")
    print(f"{'model':<36} {'batch':>5} {'numpy ms':>9} {'numba ms':>9} {'nb/np':>7} {'target':>6} {'':>5} "
          f"{'min nb/np':>10} {'max|err|':>9} {'load':>5}")
    imported = {}
    for batch in args.batches:
        for name in model_names(args.models, args.set):
            print(row(name, batch, args.repeats, imported), flush=True)


if __name__ == "__main__":
    main()
