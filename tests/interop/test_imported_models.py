"""Everything fxkit does, on every model of the corpus imported with `fxkit.from_torch` (issue 14, part 5).

Each model comes in once through the torch.export route with a symbolic
batch (shared with tests/interop/test_from_torch_corpus.py) and then goes
through the checks of tests/interop/imported_battery.py: shape inference with
the symbolic batch, ``summary``, ``fuse_elementwise``, ``fxkit.compile`` with
the numpy and numba backends, ``split_pipeline`` into 2 and 4 stages,
``fxkit.onnx.export`` run by onnxruntime, and ``fxkit.transforms.grad`` on the
parameters of the first and last layers (of the float64 model, imported anew).
``FAST`` runs unmarked; the rest is marked ``corpus`` (``pytest -m corpus``).
"""
import pytest

from tests.corpus import FAST, NAMES, build, require_libraries

require_libraries()
from tests.interop import imported_battery as battery  # noqa: E402
from tests.interop.test_from_torch_corpus import imported  # noqa: E402


def _params(names):
    return [pytest.param(name, marks=[pytest.mark.slow] + ([] if name in FAST else [pytest.mark.corpus]))
            for name in names]


@pytest.mark.parametrize("name", _params(NAMES))
def test_symbolic_shapes_summary_and_fusion(name):
    battery.check_symbolic_shapes_summary_and_fusion(*imported(name))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", _params(NAMES))
def test_compiled_matches_torch(name, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    battery.check_compiled_matches_torch(*imported(name), backend)


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("name", _params(NAMES))
def test_split_pipeline_equals_unsplit(name, stages):
    battery.check_split_pipeline_equals_unsplit(*imported(name), stages)


@pytest.mark.parametrize("name", _params(NAMES))
def test_onnx_export_runs_in_onnxruntime(name):
    battery.check_onnx_export_runs_in_onnxruntime(*imported(name))


@pytest.mark.parametrize("name", _params(NAMES))
def test_grad_of_first_and_last_layer_matches_torch(name):
    battery.check_grad_of_first_and_last_layer_matches_torch(build(name))
