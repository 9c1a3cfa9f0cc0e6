"""ONNX export and import of the resampling and writing-index ops: interpolate
(``Resize``), the adaptive pools, scatter/scatter_add (``ScatterElements``),
index_put (``ScatterND``), unbind and swapaxes. Each model is exported with a
symbolic batch, run by onnxruntime at another batch size against fxkit eager,
and imported back with `fxkit.from_onnx`."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.nn import functional as F  # noqa: E402
from tests.interop.zoo_onnx import as_tuple, relative_error, run_onnxruntime  # noqa: E402

TOLERANCE = 1e-5


def _resize(x):
    outs = []
    for mode in ("nearest", "nearest-exact"):
        outs += [F.interpolate(x, size=(7, 13), mode=mode), F.interpolate(x, scale_factor=(1.5, 0.6), mode=mode)]
    for ac in (False, True):
        for mode in ("bilinear", "bicubic"):
            outs += [F.interpolate(x, size=(9, 4), mode=mode, align_corners=ac),
                     F.interpolate(x, scale_factor=2.5, mode=mode, align_corners=ac)]
    outs.append(F.interpolate(x[:, :, 0], scale_factor=1.7, mode="linear"))
    outs.append(F.interpolate(x.unsqueeze(2), size=(3, 7, 5), mode="nearest"))
    outs.append(F.interpolate(x.unsqueeze(2), scale_factor=(2, 0.5, 1.5), mode="trilinear"))
    return tuple(outs)


def _pools(x):
    return (F.adaptive_avg_pool2d(x, (3, 4)), F.adaptive_avg_pool2d(x, (None, 2)), F.adaptive_avg_pool2d(x, 1),
            F.adaptive_max_pool2d(x, (3, 4)), F.adaptive_max_pool2d(x, (5, 5)), F.adaptive_max_pool2d(x, 1),
            nn.AdaptiveMaxPool2d((2, 3))(x))


def _index(x):
    n = x.shape[0]
    index = fxkit.tensor(np.random.default_rng(0).integers(0, 6, (1, 4, 3, 4))).expand(n, 4, 3, 4)
    src = x[:, :, :4, :] * 2
    rows, cols = fxkit.tensor([0, 2, -1, 2]), fxkit.tensor([1, 3, 0, 1])
    c0, c1, c2, c3 = x.unbind(1)
    return (x.scatter(2, index, src), x.scatter(2, index, 1.5), x.scatter_add(2, index, src),
            x.scatter(2, index, src, reduce="multiply"), x.scatter(2, index, src, reduce="add"),
            x[0].index_put((rows, cols), fxkit.ones(6)),
            x[0].index_put((rows, cols), fxkit.ones(4, 1), accumulate=True),
            x[0].index_put((rows,), fxkit.tensor(-2.0)),
            c0, c1, c2, c3, x.swapaxes(1, 3), x.swapdims(-1, 0))


@pytest.mark.parametrize("fn", [_resize, _pools, _index], ids=lambda f: f.__name__.strip("_"))
def test_export_matches_onnxruntime_and_reimports(fn):
    rng = np.random.default_rng(3)
    example = fxkit.from_numpy(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
    gm = fxkit.symbolic_trace(fn)
    proto = fxkit.onnx.export(gm, (example,))
    onnx.checker.check_model(proto, full_check=True)
    fresh = fxkit.from_numpy(rng.standard_normal((3, 4, 6, 6)).astype(np.float32))
    expected = as_tuple(gm(fresh))
    actual = run_onnxruntime(proto, (fresh,))
    reimported = as_tuple(fxkit.from_onnx(proto)(fresh))
    assert len(actual) == len(expected) == len(reimported)
    for i, (a, e, r) in enumerate(zip(actual, expected, reimported)):
        assert relative_error(a, e) < TOLERANCE, f"onnxruntime, output {i}"
        assert relative_error(r, e) < TOLERANCE, f"from_onnx, output {i}"


def test_unexportable_forms_name_the_problem():
    with pytest.raises(fxkit.LoweringError, match="return_indices=True"):
        fxkit.onnx.export(fxkit.symbolic_trace(lambda x: F.adaptive_max_pool2d(x, 3, True)[1]),
                          (fxkit.randn(1, 2, 7, 7),))
    with pytest.raises(fxkit.LoweringError, match="boolean mask"):
        fxkit.onnx.export(fxkit.symbolic_trace(lambda x: x.index_put((x > 0,), fxkit.tensor(0.0))),
                          (fxkit.randn(2, 3),))
