"""Errors of fxkit.onnx.export and fxkit.from_onnx name what, where and how to fix it;
importing a file never executes or unpickles anything from it."""
import builtins
import pathlib
import pickle

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.nn import functional as F  # noqa: E402
from tests.transforms.model_paths import zoo_model  # noqa: E402


# -- export -----------------------------------------------------------------------------------
class _Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return F.mse_loss(self.fc(x), x)


def test_unexportable_op_names_the_op_node_and_line():
    with pytest.raises(fxkit.LoweringError) as info:
        fxkit.onnx.export(_Loss(), fxkit.randn(2, 4))
    message = str(info.value)
    assert "no ONNX export rule for op 'mse_loss'" in message
    assert "test_onnx_errors.py" in message and "return F.mse_loss(self.fc(x), x)" in message
    assert "node: %mse_loss = call[mse_loss](%fc, %x)" in message
    assert "hint:" in message


class _PoolWithIndices(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)

    def forward(self, x):
        return self.pool(x)[0]


def test_unexportable_argument_inside_a_layer_names_the_layer_and_its_op():
    with pytest.raises(fxkit.LoweringError) as info:
        fxkit.onnx.export(_PoolWithIndices(), fxkit.randn(1, 2, 4, 4))
    message = str(info.value)
    assert "max_pool2d: return_indices=True has no ONNX export" in message
    assert "in the traced forward of %pool = call[self.pool](%x)" in message
    assert "hint: pool without indices for export" in message


def test_training_mode_dropout_in_a_traced_graph():
    def drop(x):
        return fxkit.nn.functional.dropout(x, 0.5, training=True)

    with pytest.raises(fxkit.LoweringError, match=r"dropout: training=True \(random\)[\s\S]*hint: call model.eval"):
        fxkit.onnx.export(fxkit.symbolic_trace(drop), fxkit.randn(2, 4))


def test_bad_arguments():
    model, inputs = zoo_model("mlp")
    with pytest.raises(ValueError, match="opset must be an int from 17"):
        fxkit.onnx.export(model, inputs, opset=13)
    with pytest.raises(fxkit.LoweringError, match=r"takes 1 inputs \(x\), got 2 example inputs"):
        fxkit.onnx.export(model, inputs * 2)
    with pytest.raises(TypeError, match="expected an fxkit.nn.Module"):
        fxkit.onnx.export(lambda x: x, inputs)


def test_dims_that_cannot_broadcast_symbolically():
    model, inputs = zoo_model("lstm_cell")
    with pytest.raises(fxkit.LoweringError, match=r"shape inference failed[\s\S]*batch vs h"):
        fxkit.onnx.export(model, inputs, dynamic_axes={0: {0: "batch"}, 1: {0: "h"}})


# -- import -----------------------------------------------------------------------------------
def _model(nodes, inputs=None, outputs=None, initializers=(), opsets=(("", 17),)):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_garbage_and_truncated_files(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not an onnx model\xff\xff")
    with pytest.raises(fxkit.GraphError, match="is not a valid ONNX model"):
        fxkit.from_onnx(garbage)
    model, inputs = zoo_model("mlp")
    data = fxkit.onnx.export(model, inputs).SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(fxkit.GraphError, match="ONNX model"):
        fxkit.from_onnx(truncated)
    with pytest.raises(fxkit.GraphError, match="cannot read"):
        fxkit.from_onnx(tmp_path / "missing.onnx")


def test_unsupported_op_type_names_node_and_op_type():
    proto = _model([helper.make_node("Hardmax", ["x"], ["y"], name="pick_max")])
    with pytest.raises(fxkit.GraphError) as info:
        fxkit.from_onnx(proto)
    message = str(info.value)
    assert "node 'pick_max' (op type Hardmax) is not supported" in message
    assert "hint: fxkit imports the op types" in message and "Conv" in message


def test_custom_domain_op():
    proto = _model([helper.make_node("Fancy", ["x"], ["y"], name="fancy_1", domain="com.acme")],
                   opsets=(("", 17), ("com.acme", 1)))
    with pytest.raises(fxkit.GraphError, match=r"node 'fancy_1' \(op type Fancy, domain 'com.acme'\) is not supported"):
        fxkit.from_onnx(proto)


def test_malformed_graph_names_node_and_op_type():
    proto = _model([helper.make_node("Relu", ["nowhere"], ["y"], name="r1")])
    with pytest.raises(fxkit.GraphError, match=r"invalid[\s\S]*'nowhere'[\s\S]*r1 OpType: Relu"):
        fxkit.from_onnx(proto)


def test_unsupported_attribute_or_input_names_node_and_op_type():
    proto = _model([helper.make_node("Mod", ["x", "x"], ["y"], name="m1", fmod=1)])
    with pytest.raises(fxkit.GraphError, match=r"node 'm1' \(op type Mod\): Mod with fmod=1"):
        fxkit.from_onnx(proto)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r"),
             helper.make_node("Cast", ["r"], ["shape"], name="to_shape", to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_by_data")]
    proto = _model(nodes, inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    with pytest.raises(fxkit.GraphError, match=r"node 'reshape_by_data' \(op type Reshape\).*must be a constant"):
        fxkit.from_onnx(proto)


_PAYLOAD = "__import__('pathlib').Path({!r}).write_text('pwned')"


def test_import_executes_and_unpickles_nothing_from_the_file(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    payload = _PAYLOAD.format(str(marker))
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Add", [payload, "w;" + payload], ["y"], name=payload, doc_string=payload)]
    proto = _model(nodes, inputs=[helper.make_tensor_value_info(payload, TensorProto.FLOAT, [2, 3])],
                   initializers=[("w;" + payload, weight)])
    proto.doc_string = payload
    path = tmp_path / "hostile.onnx"
    onnx.save(proto, str(path))

    def refuse(*args, **kwargs):
        raise AssertionError("from_onnx must not unpickle or eval anything")

    executed = []
    real_exec = builtins.exec

    def recording_exec(code, *args, **kwargs):
        executed.append(code)
        return real_exec(code, *args, **kwargs)

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(np, "load", refuse)
    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", recording_exec)
    gm = fxkit.from_onnx(path)
    x = fxkit.randn(2, 3)
    np.testing.assert_allclose(gm(x).numpy(), x.numpy() + weight, rtol=1e-6)
    monkeypatch.undo()
    assert not marker.exists()
    # Besides modules imported from installed files, the only code run is the forward fxkit generated
    # from the graph (names sanitised through the AST).
    generated = [c for c in executed if getattr(c, "co_filename", "").startswith("<fxkit-generated")]
    foreign = [c for c in executed if c not in generated and not pathlib.Path(getattr(c, "co_filename", "")).is_file()]
    assert generated and not foreign
    assert payload not in gm.code
    assert pathlib.Path(path).exists()
