"""fxkit.save / fxkit.load: a data-only round trip that never unpickles."""
import json
import pickle
import re
import sys
import types
import zipfile

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.transforms import FusedOp, fuse_elementwise, infer_shapes
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import zoo_model, zoo_params


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.scale = nn.Parameter(fxkit.rand(5))
        self.register_buffer("offset", fxkit.rand(5))

    def forward(self, x, extra):
        y = self.bn(self.conv(x)).relu()
        y = self.fc(y.view(y.shape[0], -1))
        y = y[..., 0:5:1]
        return {"out": y * self.scale + self.offset, "odd 'key'\n": extra["a'\"\nb"].to(fxkit.float32)}


def inputs(rng):
    return randn(rng, 2, 3, 6, 6), {"a'\"\nb": randn(rng, 2, 5).double()}


@pytest.mark.parametrize("suffix", ["saved.zip", "saved_dir"])
def test_round_trip_preserves_outputs_graph_and_code(rng, tmp_path, suffix):
    model = Net().train()
    gm = fxkit.symbolic_trace(model)
    fxkit.save(gm, tmp_path / suffix)
    loaded = fxkit.load(tmp_path / suffix)
    assert str(loaded.graph) == str(gm.graph)
    assert loaded.code == gm.code
    assert loaded.training and loaded.get_submodule("bn").training
    args = inputs(rng)
    assert_same(loaded(*args), model(*args))
    loaded.graph.lint()


def test_files_are_data(tmp_path):
    gm = fxkit.symbolic_trace(Net())
    fxkit.save(gm, tmp_path / "m")
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert names == ["code.py", "graph.json", "modules.json", "weights.npz"]
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    assert modules["conv"]["class"] == "Conv2d" and modules["conv"]["kwargs"]["padding"] in (1, [1, 1])
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    targets = {n["name"]: n["target"] for n in doc["nodes"]}
    assert targets["conv"] == "conv" and targets["relu"] == {"$op": "relu"}
    names = doc["weights"]
    assert {"conv.weight", "bn.running_mean", "scale", "offset"} <= set(names)
    with np.load(tmp_path / "m" / "weights.npz", allow_pickle=False) as npz:
        conv = npz[f"arr_{names.index('conv.weight')}"]
        np.testing.assert_array_equal(conv, gm.get_submodule("conv").weight.numpy())


def test_load_never_unpickles_or_runs_saved_code(rng, tmp_path, monkeypatch):
    gm = fxkit.symbolic_trace(Net())
    fxkit.save(gm, tmp_path / "m")
    marker = tmp_path / "pwned"
    (tmp_path / "m" / "code.py").write_text(f"open({str(marker)!r}, 'w').close()\n")

    def refuse(*args, **kwargs):
        raise AssertionError("load unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    loaded = fxkit.load(tmp_path / "m")
    args = inputs(rng)
    assert_same(loaded(*args), gm(*args))
    assert not marker.exists()


def test_pickled_arrays_in_weights_are_refused(tmp_path):
    gm = fxkit.symbolic_trace(Net())
    fxkit.save(gm, tmp_path / "m")
    np.savez(tmp_path / "m" / "weights.npz", np.array([object()], dtype=object))
    with pytest.raises(fxkit.GraphError, match=r"weights.npz member arr_0.npy \('conv.weight'\) holds Python objects \(dtype object\), "
                                               r"which only unpickling could read"):
        fxkit.load(tmp_path / "m")


def test_not_a_saved_module(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("graph.json", "modules.json", "weights.npz", "code.py"):
            zf.writestr(name, "{}")
    with pytest.raises(fxkit.GraphError, match="is not an fxkit GraphModule"):
        fxkit.load(path)
    (tmp_path / "plain.txt").write_text("hello")
    with pytest.raises(fxkit.GraphError, match="neither a directory nor a zip file"):
        fxkit.load(tmp_path / "plain.txt")


class Custom(nn.Module):
    def __init__(self, k=2.0):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k

    def _init_kwargs(self):
        return {"k": self.k}


@fxkit.wrap
def twice(x):
    return x * 2


class UsesCustom(nn.Module):
    def __init__(self):
        super().__init__()
        self.custom = Custom(3.0)

    def forward(self, x):
        return twice(self.custom(x))


class CustomLeaves(fxkit.Tracer):
    def is_leaf_module(self, module, qualname):
        return isinstance(module, Custom) or super().is_leaf_module(module, qualname)


def test_user_classes_and_functions_need_custom_objects(rng, tmp_path):
    model = UsesCustom()
    gm = fxkit.GraphModule(model, CustomLeaves().trace(model))
    fxkit.save(gm, tmp_path / "m.zip")
    cls_name = f"{Custom.__module__}.{Custom.__qualname__}"
    fn_name = f"{twice.__module__}.{twice.__qualname__}"
    with pytest.raises(fxkit.GraphError, match=re.escape(f"custom_objects={{{cls_name!r}: TheClass}}")):
        fxkit.load(tmp_path / "m.zip")
    with pytest.raises(fxkit.GraphError, match=re.escape(f"calls function {fn_name!r}")):
        fxkit.load(tmp_path / "m.zip", custom_objects={cls_name: Custom})
    loaded = fxkit.load(tmp_path / "m.zip", custom_objects={cls_name: Custom, fn_name: twice})
    x = randn(rng, 3)
    assert_same(loaded(x), model(x))


def test_unstorable_constant_names_the_node(tmp_path):
    graph = fxkit.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call(fxkit.ops.add, (x, object())))
    gm = fxkit.GraphModule(nn.Module(), graph)
    with pytest.raises(fxkit.GraphError, match="node %add holds a object constant"):
        fxkit.save(gm, tmp_path / "m")


def test_tensor_constants_in_args_round_trip(rng, tmp_path):
    table = randn(rng, 3)
    graph = fxkit.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call(fxkit.ops.add, (x, table)))
    gm = fxkit.GraphModule(nn.Module(), graph)
    fxkit.save(gm, tmp_path / "m")
    x = randn(rng, 3)
    assert_same(fxkit.load(tmp_path / "m")(x), x + table)


# -- fused graphs: FusedOp call targets stored as data ------------------------------------------------
def _fused_ops(gm):
    return list({id(n.target): n.target for n in gm.graph.nodes if isinstance(n.target, FusedOp)}.values())


@pytest.mark.parametrize("name", zoo_params())
def test_fused_zoo_models_round_trip(tmp_path, name):
    model, inputs = zoo_model(name)
    gm = fuse_elementwise(fxkit.symbolic_trace(model))
    fxkit.save(gm, tmp_path / "fused.zip")
    loaded = fxkit.load(tmp_path / "fused.zip")
    assert str(loaded.graph) == str(gm.graph)   # bodies print nested under the graph: they came back
    assert loaded.code == gm.code
    assert [f.name for f in _fused_ops(loaded)] == [f.name for f in _fused_ops(gm)]
    assert_same(loaded(*inputs), model(*inputs))


def test_fused_bodies_keep_meta_and_load_without_unpickling(tmp_path, monkeypatch):
    model, inputs = zoo_model("lstm_cell")
    gm = fuse_elementwise(infer_shapes(fxkit.symbolic_trace(model), *inputs))
    fxkit.save(gm, tmp_path / "m")

    def refuse(*args, **kwargs):
        raise AssertionError("load unpickled something")

    for name in ("loads", "load", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    loaded = fxkit.load(tmp_path / "m")
    assert "f32[2, 256]" in str(loaded.graph) and str(loaded.graph) == str(gm.graph)
    (before,), (after,) = _fused_ops(gm), _fused_ops(loaded)
    for old, new in zip(before.graph.nodes, after.graph.nodes):
        assert (new.name, new.stack, new.meta.get("shape")) == (old.name, old.stack, old.meta.get("shape"))
    assert_same(loaded(*inputs), model(*inputs))


def test_a_fused_op_called_twice_is_stored_and_rebuilt_once(rng, tmp_path):
    def square_then_add_one(x):
        return (x * x + 1).tanh()

    fused = _fused_ops(fuse_elementwise(fxkit.symbolic_trace(square_then_add_one)))[0]
    graph = fxkit.Graph()
    x = graph.placeholder("x")
    first = graph.call(fused, (x,))
    graph.output(graph.call(fused, (graph.call(fxkit.ops.neg, (first,)),)))
    gm = fxkit.GraphModule(nn.Module(), graph)
    fxkit.save(gm, tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    assert [row["kind"] for row in doc["targets"]] == ["fused_op"]
    loaded = fxkit.load(tmp_path / "m")
    (rebuilt,) = _fused_ops(loaded)
    assert [n.target for n in loaded.graph.nodes if n.op == "call"] == [rebuilt, fxkit.ops.neg, rebuilt]
    x = randn(rng, 4, 3)
    assert_same(loaded(x), square_then_add_one(-square_then_add_one(x)))


def _saved_lstm(tmp_path):
    gm = fuse_elementwise(fxkit.symbolic_trace(zoo_model("lstm_cell")[0]))
    fxkit.save(gm, tmp_path / "m")
    return json.loads((tmp_path / "m" / "graph.json").read_text())


def _write(tmp_path, doc):
    (tmp_path / "m" / "graph.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("corrupt, message", [
    (lambda row: row.update(kind="no_such_kind"), r"unknown call-target kind 'no_such_kind' \(registered: .*fused_op"),
    (lambda row: row["data"].update(name="fused_0; import os"), r"a fused op is named 'fused_0; import os'"),
    (lambda row: row["data"]["graph"][5].update(target="linear"),
     r"the body of fused op fused_0 holds %sigmoid = call\[self.linear\]\(%getitem\); a fused body calls registry"),
    (lambda row: row["data"]["graph"].pop(0), r"reads %getitem where no such node is defined yet"),
])
def test_corrupt_fused_ops_are_refused(tmp_path, corrupt, message):
    doc = _saved_lstm(tmp_path)
    corrupt(doc["targets"][0])
    _write(tmp_path, doc)
    with pytest.raises(fxkit.GraphError, match=message):
        fxkit.load(tmp_path / "m")


def test_a_node_of_a_missing_target_row_is_refused(tmp_path):
    doc = _saved_lstm(tmp_path)
    doc["targets"] = []
    _write(tmp_path, doc)
    with pytest.raises(fxkit.GraphError, match=r"refers to call target #0, which its targets table \(0 rows\) lacks"):
        fxkit.load(tmp_path / "m")


# -- what a crafted graph.json cannot reach -----------------------------------------------------------
@pytest.mark.parametrize("name", ["fxkit.tracer.serialize.os.system", "fxkit.tracer.serialize.save",
                                  "fxkit.cli.__main__.main"])
def test_functions_are_not_reached_through_fxkit_modules(tmp_path, name):
    gm = fxkit.symbolic_trace(lambda x: x.relu())
    fxkit.save(gm, tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    next(n for n in doc["nodes"] if n["name"] == "relu")["target"] = {"$function": name}
    _write(tmp_path, doc)
    with pytest.raises(fxkit.GraphError, match=re.escape(f"calls function {name!r}, which is no function of fxkit "
                                                         f"wrapped with fxkit.wrap")):
        fxkit.load(tmp_path / "m")


def test_wrapped_functions_of_fxkit_modules_resolve_by_their_own_name(rng, tmp_path, monkeypatch):
    module = types.ModuleType("fxkit._wrapped_for_test")

    def double(x):
        return x * 2

    double.__module__, double.__qualname__ = module.__name__, "double"
    module.double = fxkit.wrap(double)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    gm = fxkit.symbolic_trace(lambda x: module.double(x) + 1)
    fxkit.save(gm, tmp_path / "m")
    x = randn(rng, 3)
    assert_same(fxkit.load(tmp_path / "m")(x), x * 2 + 1)


def test_private_attributes_are_not_read(tmp_path):
    gm = fxkit.symbolic_trace(lambda x: x.to(x.dtype))
    fxkit.save(gm, tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    node = next(n for n in doc["nodes"] if n["target"] == {"$function": "builtins.getattr"})
    node["args"]["$tuple"][1] = "__class__"
    _write(tmp_path, doc)
    with pytest.raises(fxkit.GraphError, match=r"reads the attribute \('__class__',\); traced graphs read only public"):
        fxkit.load(tmp_path / "m")


def test_missing_or_damaged_files_are_named(tmp_path):
    fxkit.save(fxkit.symbolic_trace(lambda x: x.relu()), tmp_path / "m")
    (tmp_path / "m" / "modules.json").unlink()
    with pytest.raises(fxkit.GraphError, match=r"m lacks modules.json; fxkit.save writes graph.json, modules.json, "
                                               r"weights.npz, code.py"):
        fxkit.load(tmp_path / "m")
    (tmp_path / "m" / "modules.json").write_text("{not json")
    with pytest.raises(fxkit.GraphError, match=r"modules.json is no valid JSON \(.*\); the file is damaged"):
        fxkit.load(tmp_path / "m")
    (tmp_path / "m" / "modules.json").write_text("{}")
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    del doc["nodes"][1]["op"]
    _write(tmp_path, doc)
    with pytest.raises(fxkit.GraphError, match=r"graph.json: node 'relu' is damaged \(KeyError: 'op'\); save the "
                                               r"module again"):
        fxkit.load(tmp_path / "m")


class _Keywords(nn.Module):
    def forward(self, x, y):
        return fxkit.ops.add(input=fxkit.ops.addmm(input=y, mat1=x, mat2=x.t(), beta=0.5), other=y, alpha=2)


def test_files_of_version_2_with_old_parameter_names_still_load(rng, tmp_path):
    """Version 2 files stored keywords by the ops' names before issue 15 (``add(a=, b=)``)."""
    gm = fxkit.symbolic_trace(_Keywords())
    fxkit.save(gm, tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "graph.json").read_text())
    assert doc["version"] == 3
    old = {"addmm": {"input": "inp", "mat1": "a", "mat2": "b"}, "add": {"input": "a", "other": "b"}}
    renamed = 0
    for node in doc["nodes"]:
        names = old.get(node["target"].get("$op") if isinstance(node["target"], dict) else None, {})
        pairs = node["kwargs"]["$dict"]
        if any(k in names for k, _ in pairs):
            node["kwargs"]["$dict"] = [[names.get(k, k), v] for k, v in pairs]
            renamed += 1
    assert renamed == 2, doc["nodes"]
    doc["version"] = 2
    _write(tmp_path, doc)
    loaded = fxkit.load(tmp_path / "m")
    x, y = randn(rng, 3, 4), randn(rng, 3, 3)
    assert_same(loaded(x, y), gm(x, y))
    with pytest.raises(TypeError):  # a version 3 file with the old names is not migrated
        doc["version"] = 3
        _write(tmp_path, doc)
        fxkit.load(tmp_path / "m")(x, y)
