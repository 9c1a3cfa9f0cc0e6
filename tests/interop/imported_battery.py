"""Everything fxkit does, as checks on one imported model (issue 14, part 5).

``check_*(entry, gm)`` take a `CorpusModel` and the GraphModule that
`fxkit.from_torch` made of it with a symbolic batch, and run: shape inference
with the symbolic batch and ``summary``, ``fuse_elementwise``, ``fxkit.compile``
with one backend, ``split_pipeline`` into n stages, ``fxkit.onnx.export`` run by
onnxruntime. The reference is PyTorch eager (1e-4 of the output's largest
magnitude), except for the split pipeline, which must equal the unsplit graph.
``check_grad_of_first_and_last_layer_matches_torch(entry)`` imports the float64
model and compares ``fxkit.transforms.grad`` of the first and last layers'
parameters with PyTorch's, in float64 where float32 rounding through dozens of
layers would otherwise dominate, for random output gradients.
tests/interop/test_imported_models.py runs them over the corpus,
tests/interop/test_generality_everything.py over the generality sweep.
"""
import copy
import io

import numpy as np
import pytest
import torch

import fxkit
from fxkit.interop.torch_export import input_specs
from fxkit.transforms.cost import summary
from fxkit.transforms.fuse_elementwise import fuse_elementwise
from fxkit.transforms.infer_shapes import infer_shapes
from fxkit.transforms.split_pipeline import split_pipeline
from fxkit.transforms.symbolic import Sym
from tests.interop.test_from_torch_corpus import _first_meta, _flat

TOLERANCE = 1e-4
SEED, BATCH = 11, 2


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


def check_symbolic_shapes_summary_and_fusion(entry, gm):
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


def check_compiled_matches_torch(entry, gm, backend):
    compiled = fxkit.compile(gm, backend=backend)
    for batch, seed in ((BATCH, SEED), (3, SEED + 1)):
        _, expected, tensors = _inputs(entry, batch, seed)
        assert _relative(compiled(*tensors), expected) < TOLERANCE
    if backend == "numba":  # NOTE: the cost model may run tiny groups and ReLU tails as numpy ops; something of
        # the numba backend's own (a kernel, a conv rule) must run
        assert any(not d.choice.startswith("numpy") for d in compiled._last.lowered.decisions), compiled.explain()


def check_split_pipeline_equals_unsplit(entry, gm, stages):
    _, _, tensors = _inputs(entry)
    parent = split_pipeline(gm, tuple(tensors), n_stages=stages, verbose=False)
    assert len(list(parent.children())) == stages
    whole, split = _flat(gm(*tensors)), _flat(parent(*tensors))
    assert len(whole) == len(split)
    for a, b in zip(whole, split):
        np.testing.assert_array_equal(a, b)


def check_onnx_export_runs_in_onnxruntime(entry, gm):
    onnxruntime = pytest.importorskip("onnxruntime")
    _, expected, tensors = _inputs(entry)
    proto = fxkit.onnx.export(gm, tuple(tensors))
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {info.name: x.numpy() for info, x in zip(session.get_inputs(), tensors)}
    assert _relative(tuple(fxkit.from_numpy(a) for a in session.run(None, feeds)), expected) < TOLERANCE


def import_float64(entry):
    """The torch model in float64 and `fxkit.from_torch` of it with a symbolic batch.

    The float64 model is imported anew rather than taken as ``gm.double()``: a
    model's numerics may depend on its dtype beyond rounding (GPT-Neo adds two
    masks of ``finfo(dtype).min``, which overflow to -inf in float32 and not in
    float64, so fully masked rows differ), and the float32 export bakes the
    float32 constants in.
    """
    model = copy.deepcopy(entry.model).double()
    example = tuple(x.double() if x.is_floating_point() else x for x in entry.example_inputs)
    batch = torch.export.Dim("N", min=1, max=64)
    dynamic = {name: {dim: batch} for name, dim in zip(entry.input_names, entry.batch_dims)}
    return model, fxkit.from_torch(model, entry.kwargs(example), dynamic_shapes=dynamic)


def check_grad_of_first_and_last_layer_matches_torch(entry):
    model, gm = import_float64(entry)
    names = list(dict(gm.named_parameters()))
    wanted = [names[0], names[-1]]
    inputs = tuple(x.double() if x.is_floating_point() else x for x in entry.make_inputs(BATCH, SEED))
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
