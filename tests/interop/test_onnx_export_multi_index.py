"""fxkit.onnx.export of indexing with several index tensors side by side (``x[i, j]``, ``x[:, i, j]``),
as transformers' attention-mask builders write it, checked against numpy's advanced indexing in onnxruntime."""
import numpy as np
import pytest

pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from fxkit.errors import LoweringError  # noqa: E402


class Pick(fxkit.nn.Module):
    def __init__(self, lead):
        super().__init__()
        self.lead = lead

    def forward(self, x, i, j):
        return x[:, i, j] if self.lead else x[i, j]


def _run(proto, inputs):
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {info.name: a for info, a in zip(session.get_inputs(), inputs)})[0]


@pytest.mark.parametrize("lead", [False, True])
def test_several_index_tensors_export_as_gather_nd(lead):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 6, 4)).astype(np.float32)
    i = rng.integers(-3, 3, (2, 1)).astype(np.int64)  # negative indices too; broadcasts against j
    j = rng.integers(0, 4, (1, 3)).astype(np.int64)
    if lead:
        i, j = (i + 7) % 5, j % 6
    model = Pick(lead)
    inputs = [fxkit.from_numpy(a) for a in (x, i, j)]
    proto = fxkit.onnx.export(model, tuple(inputs), dynamic_batch=False)
    assert any(n.op_type == "GatherND" for n in proto.graph.node)
    expected = x[:, i, j] if lead else x[i, j]
    np.testing.assert_array_equal(model(*inputs).numpy(), expected)
    np.testing.assert_array_equal(_run(proto, (x, i, j)), expected)


class Apart(fxkit.nn.Module):
    def forward(self, x, i, j):
        return x[i, :, j]


def test_index_tensors_apart_are_refused_with_a_hint():
    x, i = fxkit.from_numpy(np.zeros((3, 4, 5), np.float32)), fxkit.from_numpy(np.zeros(2, np.int64))
    with pytest.raises(LoweringError, match="index one dimension at a time"):
        fxkit.onnx.export(Apart(), (x, i, i), dynamic_batch=False)
