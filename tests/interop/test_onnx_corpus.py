"""Every ONNX file torch.onnx.export (TorchScript route, opset 17) makes of the model corpus imports with
fxkit.from_onnx and matches PyTorch eager and onnxruntime within 1e-4, at a batch size other than the
exported one. The FAST subset runs unmarked; the rest of the corpus is marked `corpus` (`pytest -m corpus`)."""
import warnings

import pytest

from tests.corpus import FAST, NAMES, build, require_libraries

require_libraries()
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from tests.corpus.onnx_files import export_onnx  # noqa: E402
from tests.interop.zoo_onnx import relative_error, run_onnxruntime  # noqa: E402

TOLERANCE = 1e-4
PARAMS = [pytest.param(name, marks=() if name in FAST else pytest.mark.corpus) for name in NAMES]


def exported(name):
    """The corpus model's ONNX file; a model torch's exporter refuses is skipped with its reason."""
    try:
        return export_onnx(name)
    except Exception as error:  # noqa: BLE001  (the exporter's own errors vary: SymbolicValueError, ...)
        pytest.skip(f"torch.onnx.export cannot export {name}: {str(error).splitlines()[0][:200]}")


@pytest.mark.parametrize("name", PARAMS)
def test_corpus_model_imports_and_matches_torch_and_onnxruntime(name):
    proto = exported(name)
    entry = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = fxkit.from_onnx(proto)
    gm.graph.lint()
    inputs = entry.make_inputs(3, 1)  # exported at batch 2: the batch stays symbolic
    ours = tuple(fxkit.from_numpy(x.numpy()) for x in inputs)
    imported = gm(*ours)
    imported = imported if isinstance(imported, tuple) else (imported,)
    expected = entry(*inputs)
    runtime = run_onnxruntime(proto, ours)
    assert len(imported) == len(expected) == len(runtime)
    for i, e, r in zip(imported, expected, runtime):
        assert relative_error(i, e) < TOLERANCE
        assert relative_error(i, r) < TOLERANCE


def test_the_corpus_has_every_listed_model():
    assert len(NAMES) == 26 and set(FAST) <= set(NAMES)
    assert sum(n.startswith("torchvision/") for n in NAMES) == 16
    assert sum(n.startswith("timm/") for n in NAMES) == 4
