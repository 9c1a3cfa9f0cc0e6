"""The torch.export route of `fxkit.from_torch` on the real-model corpus (tests/corpus).

Each model is imported once with a symbolic batch (``torch.export.Dim("N")``
on every input's batch dimension) and must match PyTorch eager within 1e-4
relative error at two batch sizes; shape inference with the symbolic batch
must reach the outputs; parameters and buffers keep their ``state_dict`` names
and nodes name the torch module they came from. ``FAST`` (a plain convnet, a
depthwise/squeeze-excite convnet, a masked encoder, a causal decoder) runs
unmarked; the rest of the corpus is marked ``corpus`` (``pytest -m corpus``).
The vision generality set (`tests.corpus.generality_vision`: torchvision and timm
models outside the corpus list) goes through the same checks, its two ``FAST``
representatives unmarked; its ``KNOWN_FAILURES`` are expected to fail, and its
``FLOAT64_REFERENCE`` models are compared with PyTorch in float64.
"""
import functools

import numpy as np
import pytest

from tests.corpus import FAST, NAMES, build, generality_vision, require_libraries

require_libraries()
import torch  # noqa: E402

import fxkit  # noqa: E402
from tests.corpus.entry import flatten_outputs  # noqa: E402
from fxkit.interop.torch_export import input_specs  # noqa: E402
from fxkit.runtime.meta import TensorMeta  # noqa: E402
from fxkit.transforms.infer_shapes import infer_shapes  # noqa: E402
from fxkit.transforms.symbolic import Sym  # noqa: E402

TOLERANCE = 1e-4


ALL_NAMES = NAMES + generality_vision.NAMES
ALL_FAST = FAST + generality_vision.FAST


def _params(names):
    return [pytest.param(name, marks=_marks(name)) for name in names]


def _marks(name):
    marks = [] if name in ALL_FAST else [pytest.mark.corpus]
    if name in generality_vision.KNOWN_FAILURES:
        marks.append(pytest.mark.xfail(reason=generality_vision.KNOWN_FAILURES[name], raises=fxkit.GraphError,
                                       strict=True))
    return marks


@functools.lru_cache(maxsize=None)
def imported(name):
    entry = build(name)
    batch = torch.export.Dim("N", min=1, max=64)
    dynamic = {name: {dim: batch} for name, dim in zip(entry.input_names, entry.batch_dims)}
    return entry, fxkit.from_torch(entry.model, entry.kwargs(entry.example_inputs), dynamic_shapes=dynamic)


def _flat(value):
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        return tuple(a for item in value for a in _flat(item))
    return () if value is None else (np.asarray(value.numpy(), np.float64),)


@functools.lru_cache(maxsize=None)
def _in_float64(name):
    import copy

    return copy.deepcopy(build(name).model).double()


def _expected(entry, inputs):
    """PyTorch's outputs: in float32, or in float64 for the ill-conditioned models that list says."""
    if entry.name not in generality_vision.FLOAT64_REFERENCE:
        return entry(*inputs)
    with torch.no_grad():
        return flatten_outputs(_in_float64(entry.name)(**{k: v.double() for k, v in entry.kwargs(inputs).items()}))


@pytest.mark.parametrize("name", _params(ALL_NAMES))
def test_corpus_model_matches_torch_at_two_batch_sizes(name):
    entry, gm = imported(name)
    for batch, seed in ((2, 5), (3, 6)):
        inputs = entry.make_inputs(batch, seed)
        expected = _expected(entry, inputs)
        actual = _flat(gm(**{k: fxkit.from_numpy(x.numpy()) for k, x in entry.kwargs(inputs).items()}))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape
            assert np.max(np.abs(a - e)) / max(np.max(np.abs(e)), 1e-30) < TOLERANCE


@pytest.mark.parametrize("name", _params(ALL_NAMES))
def test_corpus_model_has_symbolic_batch_names_and_module_paths(name):
    entry, gm = imported(name)
    infer_shapes(gm, *input_specs(gm))
    outputs = gm.graph.output_node().meta["tensor_meta"]
    first = _first_meta(outputs)
    assert first.shape[entry.batch_dims[0]] == Sym.symbol("N")
    state = set(entry.model.state_dict())
    attrs = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    assert {a for a in attrs if "_tensor_constant" not in a} <= state | set(dict(entry.model.named_buffers()))
    assert set(dict(gm.named_parameters())) <= state
    paths = {n.stack.module for n in gm.graph.nodes if n.op == "call" and n.stack is not None}
    # NOTE: a module shared under two names (CoaT's cpe1 is also serial_blocks1.0.cpe) is recorded
    # under the name the forward reached it by; named_modules lists only the first without this flag.
    modules = dict(entry.model.named_modules(remove_duplicate=False))
    assert len(paths - {""}) > 3 and paths <= set(modules)


def _first_meta(value):
    if isinstance(value, TensorMeta):
        return value
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        return next(m for m in (_first_meta(v) for v in value) if m is not None)
    return value
