"""Every model of the corpus, imported (from_onnx; from_torch where it imports), compiled with
``backend="onnxruntime"`` matches PyTorch eager within 1e-4, at a batch size other than the one it was
compiled for (one session serves both where the model's batch stays symbolic, one each where it does
not). All slow: each model builds torch and a session."""
import inspect
import warnings

import pytest

from tests.corpus import NAMES, build, require_libraries

require_libraries()
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from tests.interop.test_onnx_corpus import TOLERANCE, exported  # noqa: E402
from tests.interop.zoo_onnx import relative_error  # noqa: E402

pytestmark = pytest.mark.corpus


def imported(name, route):
    entry = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if route == "from_onnx":
            return fxkit.from_onnx(exported(name))
        params = list(inspect.signature(entry.model.forward).parameters)
        module = entry.model if params[:len(entry.input_names)] == list(entry.input_names) else entry.keyword_call()
        takes_inputs = len(inspect.signature(fxkit.from_torch).parameters) > 1  # the torch.export route
        try:
            return fxkit.from_torch(module, entry.example_inputs) if takes_inputs else fxkit.from_torch(module)
        except fxkit.FxkitError as error:
            pytest.skip(f"from_torch cannot import {name} yet: {str(error).splitlines()[0][:200]}")


@pytest.mark.parametrize("route", ["from_onnx", "from_torch"])
@pytest.mark.parametrize("name", NAMES)
def test_corpus_model_on_the_delegate_matches_torch(name, route):
    entry = build(name)
    gm = imported(name, route)
    example = tuple(fxkit.from_numpy(x.numpy()) for x in entry.make_inputs(2, 0))
    compiled = fxkit.compile(gm, backend="onnxruntime", example_inputs=example)
    inputs = entry.make_inputs(3, 1)
    ours = compiled(*(fxkit.from_numpy(x.numpy()) for x in inputs))
    ours = ours if isinstance(ours, tuple) else (ours,)
    expected = entry(*inputs)
    assert len(ours) == len(expected)
    for actual, wanted in zip(ours, expected):
        assert relative_error(actual, wanted) < TOLERANCE
