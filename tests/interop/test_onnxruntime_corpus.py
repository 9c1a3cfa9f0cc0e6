"""Every model of the corpus, imported (from_onnx; from_torch where it imports), compiled with
``backend="onnxruntime"`` matches PyTorch eager within 1e-4, at a batch size other than the one it was
compiled for (one session serves both where the model's batch stays symbolic, one each where it does
not). from_torch imports with a symbolic batch (``Dim("N")``). All under the corpus marker: each model
builds torch and a session."""
import warnings

import pytest

from tests.corpus import NAMES, build, require_libraries

require_libraries()
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from tests.interop.test_from_torch_corpus import _flat, imported as symbolic_batch_import  # noqa: E402
from tests.interop.test_onnx_corpus import TOLERANCE, exported  # noqa: E402
from tests.interop.zoo_onnx import relative_error  # noqa: E402

pytestmark = pytest.mark.corpus


def imported(name, route):
    """The corpus model through ``route``; from_torch imports it with a symbolic batch, as users should."""
    if route == "from_onnx":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fxkit.from_onnx(exported(name))
    return symbolic_batch_import(name)[1]


@pytest.mark.parametrize("route", ["from_onnx", "from_torch"])
@pytest.mark.parametrize("name", NAMES)
def test_corpus_model_on_the_delegate_matches_torch(name, route):
    entry = build(name)
    gm = imported(name, route)
    example = tuple(fxkit.from_numpy(x.numpy()) for x in entry.make_inputs(2, 0))
    compiled = fxkit.compile(gm, backend="onnxruntime", example_inputs=example)
    inputs = entry.make_inputs(3, 1)
    ours = _flat(compiled(*(fxkit.from_numpy(x.numpy()) for x in inputs)))
    expected = entry(*inputs)
    assert len(ours) == len(expected)
    for actual, wanted in zip(ours, expected):
        assert relative_error(actual, wanted) < TOLERANCE
