"""Everything fxkit does, on the Hugging Face models of the generality sweep (tests/corpus/generality_text.py).

Each model is imported once with a symbolic batch (shared with
tests/interop/test_generality_text.py, which checks eager equality) and goes
through the checks of tests/interop/imported_battery.py: symbolic shape
inference, ``summary`` and ``fuse_elementwise``; ``fxkit.compile`` with the
numpy and numba backends; ``split_pipeline`` into 2 and 4 stages;
``fxkit.onnx.export`` run by onnxruntime; ``fxkit.transforms.grad`` of the
first and last layers' parameters against PyTorch in float64. ``FAST`` (a
decoder with ALiBi biases) runs unmarked; the rest is marked ``corpus``.
"""
import pytest

from tests.corpus import require_libraries

require_libraries()
from tests.corpus.generality_text import GENERALITY, build_generality  # noqa: E402
from tests.interop import imported_battery as battery  # noqa: E402
from tests.interop.test_generality_text import _imported  # noqa: E402

FAST = ("BloomForCausalLM",)


def _params(names):
    return [pytest.param(name, marks=[pytest.mark.slow] + ([] if name in FAST else [pytest.mark.corpus]))
            for name in names]


@pytest.mark.parametrize("name", _params(GENERALITY))
def test_symbolic_shapes_summary_and_fusion(name):
    battery.check_symbolic_shapes_summary_and_fusion(*_imported(name))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", _params(GENERALITY))
def test_compiled_matches_torch(name, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    battery.check_compiled_matches_torch(*_imported(name), backend)


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("name", _params(GENERALITY))
def test_split_pipeline_equals_unsplit(name, stages):
    battery.check_split_pipeline_equals_unsplit(*_imported(name), stages)


@pytest.mark.parametrize("name", _params(GENERALITY))
def test_onnx_export_runs_in_onnxruntime(name):
    battery.check_onnx_export_runs_in_onnxruntime(*_imported(name))


@pytest.mark.parametrize("name", _params(GENERALITY))
def test_grad_of_first_and_last_layer_matches_torch(name):
    battery.check_grad_of_first_and_last_layer_matches_torch(build_generality(name))
