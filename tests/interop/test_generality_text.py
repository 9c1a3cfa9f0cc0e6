"""`fxkit.from_torch` on Hugging Face transformers models beyond the corpus (tests/corpus/generality_text.py).

Each model is built from a tiny Config with random weights, imported once
with a symbolic batch (``torch.export.Dim("N")`` on every input's batch
dimension), and must match PyTorch eager within 1e-4 of the output's largest
magnitude at two batch sizes; shape inference with the symbolic batch must
reach the outputs. ``FAST`` (an encoder-decoder with cross-attention and a
decoder with ALiBi biases) runs unmarked; the rest is marked ``corpus``.
"""
import functools

import numpy as np
import pytest

from tests.corpus import require_libraries

require_libraries()
import torch  # noqa: E402

import fxkit  # noqa: E402
from fxkit.interop.torch_export import input_specs  # noqa: E402
from fxkit.transforms.infer_shapes import infer_shapes  # noqa: E402
from fxkit.transforms.symbolic import Sym  # noqa: E402
from tests.corpus.entry import check_distinct  # noqa: E402
from tests.corpus.generality_text import GENERALITY, build_generality  # noqa: E402
from tests.interop.test_from_torch_corpus import _first_meta, _flat  # noqa: E402

TOLERANCE = 1e-4
FAST = ("BartForConditionalGeneration", "BloomForCausalLM")


def _params(names):
    return [pytest.param(name, marks=[pytest.mark.slow] + ([] if name in FAST else [pytest.mark.corpus]))
            for name in names]


@functools.lru_cache(maxsize=None)
def _imported(name):
    entry = build_generality(name)
    batch = torch.export.Dim("N", min=1, max=64)
    dynamic = {name: {dim: batch} for name, dim in zip(entry.input_names, entry.batch_dims)}
    return entry, fxkit.from_torch(entry.model, entry.kwargs(entry.example_inputs), dynamic_shapes=dynamic)


@pytest.mark.parametrize("name", _params(GENERALITY))
def test_imported_model_matches_torch_at_two_batch_sizes(name):
    entry, gm = _imported(name)
    check_distinct(entry)
    for batch, seed in ((2, 5), (3, 6)):
        inputs = entry.make_inputs(batch, seed)
        expected = entry(*inputs)
        actual = _flat(gm(**{k: fxkit.from_numpy(x.numpy()) for k, x in entry.kwargs(inputs).items()}))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape
            assert np.max(np.abs(a - e)) / max(np.max(np.abs(e)), 1e-30) < TOLERANCE


@pytest.mark.parametrize("name", _params(GENERALITY))
def test_shapes_are_inferred_with_the_symbolic_batch(name):
    entry, gm = _imported(name)
    infer_shapes(gm, *input_specs(gm))
    assert _first_meta(gm.graph.output_node().meta["tensor_meta"]).shape[0] == Sym.symbol("N")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="RobertaModel"):
        build_generality("RobertaModle")
