"""Everything fxkit does, on every model of the corpus imported with `fxkit.from_torch` (issue 14, part 5).

Each model comes in once through the torch.export route with a symbolic
batch (shared with tests/interop/test_from_torch_corpus.py) and then goes
through: shape inference with the symbolic batch, ``summary``,
``fuse_elementwise``, ``fxkit.compile`` with the numpy and numba backends,
``split_pipeline`` into 2 and 4 stages, ``fxkit.onnx.export`` run by
onnxruntime, and ``fxkit.transforms.grad`` on the parameters of the first and
last layers. The reference is PyTorch eager (1e-4 of the output's largest
magnitude), except for the split pipeline, which must equal the unsplit graph.
Gradients are compared in float64 (model and inputs), where float32 rounding
through dozens of layers would otherwise dominate the comparison, for random
output gradients (``grad_outputs=True``). ``FAST``
runs unmarked; the rest is marked ``corpus`` (``pytest -m corpus``).
"""
import copy
import functools
import io

import numpy as np
import pytest

from tests.corpus import FAST, NAMES, require_libraries

require_libraries()
import torch  # noqa: E402

import fxkit  # noqa: E402
from fxkit.interop.torch_export import input_specs  # noqa: E402
from fxkit.transforms.cost import summary  # noqa: E402
from fxkit.transforms.fuse_elementwise import fuse_elementwise  # noqa: E402
from fxkit.transforms.infer_shapes import infer_shapes  # noqa: E402
from fxkit.transforms.split_pipeline import split_pipeline  # noqa: E402
from fxkit.transforms.symbolic import Sym  # noqa: E402
from tests.interop.test_from_torch_corpus import _first_meta, _flat, imported  # noqa: E402

TOLERANCE = 1e-4
SEED, BATCH = 11, 2


def _params(names):
    return [pytest.param(name, marks=[pytest.mark.slow] + ([] if name in FAST else [pytest.mark.corpus]))
            for name in names]


def _inputs(entry, batch=BATCH, seed=SEED):
    """Torch inputs, the reference outputs (float64 numpy) and fxkit Tensors in forward order."""
    inputs = entry.make_inputs(batch, seed)
    return inputs, entry(*inputs), [fxkit.from_numpy(x.numpy()) for x in inputs]


def _relative(actual, expected):
    actual, expected = _flat(actual), tuple(np.asarray(e, np.float64) for e in expected)
    assert len(actual) == len(expected)
    worst = 0.0
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
        worst = max(worst, float(np.max(np.abs(a - e)) / max(float(np.max(np.abs(e))), 1e-30)))
    return worst


def _call(gm, entry, tensors):
    return gm(**dict(zip(entry.input_names, tensors)))


@pytest.mark.parametrize("name", _params(NAMES))
def test_symbolic_shapes_summary_and_fusion(name):
    entry, gm = imported(name)
    specs = input_specs(gm)
    infer_shapes(gm, *specs)
    assert _first_meta(gm.graph.output_node().meta["tensor_meta"]).shape[entry.batch_dims[0]] == Sym.symbol("N")
    from rich.console import Console
    console = Console(file=io.StringIO(), width=200)
    total = summary(gm, *specs, console=console)
    assert total.params == sum(p.numel() for p in gm.parameters()) and "parameters" in console.file.getvalue()
    fused = fuse_elementwise(copy.deepcopy(gm))
    _, expected, tensors = _inputs(entry)
    assert _relative(_call(fused, entry, tensors), expected) < TOLERANCE


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", _params(NAMES))
def test_compiled_matches_torch(name, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    entry, gm = imported(name)
    compiled = fxkit.compile(gm, backend=backend)
    for batch, seed in ((BATCH, SEED), (3, SEED + 1)):
        _, expected, tensors = _inputs(entry, batch, seed)
        assert _relative(compiled(*tensors), expected) < TOLERANCE


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("name", _params(NAMES))
def test_split_pipeline_equals_unsplit(name, stages):
    entry, gm = imported(name)
    _, _, tensors = _inputs(entry)
    parent = split_pipeline(gm, tuple(tensors), n_stages=stages, verbose=False)
    assert len(list(parent.children())) == stages
    whole, split = _flat(gm(*tensors)), _flat(parent(*tensors))
    assert len(whole) == len(split)
    for a, b in zip(whole, split):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", _params(NAMES))
def test_onnx_export_runs_in_onnxruntime(name):
    onnxruntime = pytest.importorskip("onnxruntime")
    entry, gm = imported(name)
    _, expected, tensors = _inputs(entry)
    proto = fxkit.onnx.export(gm, tuple(tensors))
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {info.name: x.numpy() for info, x in zip(session.get_inputs(), tensors)}
    assert _relative(tuple(fxkit.from_numpy(a) for a in session.run(None, feeds)), expected) < TOLERANCE


@functools.lru_cache(maxsize=None)
def _float64(name):
    """The imported model and the torch model, both in float64."""
    entry, gm = imported(name)
    return entry, copy.deepcopy(gm).double(), copy.deepcopy(entry.model).double()


def _float64_inputs(inputs):
    return tuple(x.double() if x.is_floating_point() else x for x in inputs)


@pytest.mark.parametrize("name", _params(NAMES))
def test_grad_of_first_and_last_layer_matches_torch(name):
    entry, gm, model = _float64(name)
    names = list(dict(gm.named_parameters()))
    wanted = [names[0], names[-1]]
    inputs = _float64_inputs(entry.make_inputs(BATCH, SEED))
    reference = dict(model.named_parameters(remove_duplicate=False))
    model.zero_grad()
    outputs = [t for t in _torch_outputs(model(**entry.kwargs(inputs))) if t.is_floating_point()]
    cotangents = _cotangents(outputs)
    sum((t * g).sum() for t, g in zip(outputs, cotangents)).backward()
    tensors = [fxkit.from_numpy(x.numpy()) for x in inputs]
    graph = fxkit.transforms.grad(gm, wrt=wanted, grad_outputs=True, example_inputs=tensors)
    _, grads = graph(*tensors, *(fxkit.from_numpy(g.numpy()) for g in cotangents))
    assert set(grads) == set(wanted)
    for key in wanted:
        expected = reference[key].grad.numpy()
        actual = grads[key].numpy()
        assert actual.shape == expected.shape
        assert np.max(np.abs(expected)) > 1e-6, f"{key}: the reference gradient vanishes; nothing to compare"
        error = float(np.max(np.abs(actual - expected)) / max(float(np.max(np.abs(expected))), 1e-30))
        assert error < TOLERANCE, f"{key}: relative error {error:.3g}"


def _cotangents(outputs):
    """Random output gradients (float64): with the plain sum of every output, a model ending in a LayerNorm
    of unit weight (DistilBERT) has gradients that are rounding noise (1e-15), as d(sum(normalised))/dx = 0."""
    generator = torch.Generator().manual_seed(SEED)
    return [torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in outputs]


def _torch_outputs(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [t for item in value if item is not None for t in _torch_outputs(item)]
