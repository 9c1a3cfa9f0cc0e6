"""from_onnx of ONNX ``LSTM`` and ``GRU`` nodes: files torch.onnx.export writes for
nn.LSTM/nn.GRU against PyTorch, and hand-built nodes with the attributes torch does
not write (batch-first layout, reverse direction, GRU's linear_before_reset=0, given
initial states) against onnxruntime."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import fxkit  # noqa: E402
from tests.interop.zoo_onnx import relative_error  # noqa: E402

TOLERANCE = 1e-5


@pytest.mark.parametrize("kwargs", [
    pytest.param({}, id="default", marks=pytest.mark.slow),
    pytest.param({"num_layers": 2, "bidirectional": True, "batch_first": True}, id="stacked"),
    pytest.param({"bias": False}, id="no_bias", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["LSTM", pytest.param("GRU", marks=pytest.mark.slow)])
def test_files_torch_writes_import(name, kwargs, tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = getattr(torch.nn, name)(5, 6, **kwargs).eval()
    batch_axis = 0 if kwargs.get("batch_first") else 1

    def example(n):
        shape = [4, 4]
        shape[batch_axis] = n
        return torch.randn(*shape, 5)

    path = tmp_path / "rnn.onnx"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (example(2),), str(path), dynamo=False, opset_version=17, input_names=["x"],
                              dynamic_axes={"x": {batch_axis: "N"}})
    except Exception as exc:  # noqa: BLE001  (the exporter's own dependencies may be missing)
        pytest.skip(f"torch.onnx.export is unavailable here: {exc}")
    assert name in {n.op_type for n in onnx.load(str(path)).graph.node}
    gm = fxkit.from_onnx(path)
    x = example(3)
    with torch.no_grad():
        output, states = model(x)
    expected = [output] + (list(states) if isinstance(states, tuple) else [states])
    got = gm(fxkit.from_numpy(x.numpy()))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert relative_error(g, e.numpy()) < TOLERANCE


def _node_model(op_type, attrs, batch_first, with_states, rng):
    """One ONNX node over random weights and the inputs to feed it; with ``batch_first`` the
    node uses ``layout=1`` and the feeds are batch first."""
    from onnx import TensorProto, helper

    hidden, size, seq, batch = 3, 4, 5, 2
    gates = 4 if op_type == "LSTM" else 3
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    inits = {"W": rng.standard_normal((dirs, gates * hidden, size)),
             "R": rng.standard_normal((dirs, gates * hidden, hidden)),
             "B": rng.standard_normal((dirs, 2 * gates * hidden))}
    names, feeds = ["X", "W", "R", "B", ""], {"X": rng.standard_normal((seq, batch, size))}
    for state in (["h0", "c0"] if op_type == "LSTM" else ["h0"]) if with_states else []:
        names.append(state)
        feeds[state] = rng.standard_normal((dirs, batch, hidden))
    feeds = {k: (v.swapaxes(0, 1) if batch_first else v).astype(np.float32) for k, v in feeds.items()}
    outputs = {"Y": (seq, dirs, batch, hidden), "Y_h": (dirs, batch, hidden)}
    if op_type == "LSTM":
        outputs["Y_c"] = (dirs, batch, hidden)
    if batch_first:
        outputs = {k: ((batch, seq, dirs, hidden) if k == "Y" else (batch, dirs, hidden)) for k in outputs}
    node = helper.make_node(op_type, names, list(outputs), hidden_size=hidden, layout=int(batch_first), **attrs)
    graph = helper.make_graph(
        [node], "rnn", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def _onnxruntime(op_type, attrs, with_states):
    """The node's outputs by onnxruntime, which runs only ``layout=0``: the sequence-first twin
    of the node on the same weights and inputs, outputs moved batch first."""
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _node_model(op_type, attrs, False, with_states, np.random.default_rng(0))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("op_type, attrs, batch_first, with_states", [
    ("LSTM", {"direction": "reverse"}, True, True),
    ("LSTM", {"direction": "bidirectional"}, False, False),
    ("GRU", {"direction": "reverse", "linear_before_reset": 0}, False, True),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 0}, True, False),
    ("GRU", {"linear_before_reset": 1}, True, True),
])
def test_nodes_match_onnxruntime(op_type, attrs, batch_first, with_states):
    expected = _onnxruntime(op_type, attrs, with_states)
    if batch_first:
        expected = [np.moveaxis(expected[0], 2, 0)] + [e.swapaxes(0, 1) for e in expected[1:]]  # (N, L, D, H)
    model, feeds = _node_model(op_type, attrs, batch_first, with_states, np.random.default_rng(0))
    got = fxkit.from_onnx(model)(*(fxkit.from_numpy(v) for v in feeds.values()))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert relative_error(g, e) < TOLERANCE


def test_unsupported_attributes_are_named():
    model, _ = _node_model("LSTM", {"clip": 2.0}, False, False, np.random.default_rng(0))
    with pytest.raises(fxkit.GraphError, match="LSTM with clip or input_forget"):
        fxkit.from_onnx(model)
