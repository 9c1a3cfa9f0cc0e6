"""Graph API that torch.fx code uses: DCE with is_impure_node, find_nodes' opcode check,
node tags, snake-cased names, plain tensor attributes as get_attr, to_folder."""
import importlib
import sys

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, nn, ops
from fxkit.graph import Graph


def test_eliminate_dead_code_with_is_impure_node():
    g = Graph()
    x = g.placeholder("x")
    kept = g.call(ops.neg, (x,))
    dropped = g.call(ops.relu, (x,))
    g.output(x)
    assert g.eliminate_dead_code(is_impure_node=lambda n: n is kept)
    assert kept in list(g.nodes) and dropped not in list(g.nodes)
    assert [n.op for n in g.nodes] == ["placeholder", "call", "output"]  # the placeholder always stays


def test_find_nodes_refuses_an_unknown_opcode():
    g = Graph()
    g.output(g.placeholder("x"))
    with pytest.raises(GraphError) as info:
        g.find_nodes(op="call_function")
    message = str(info.value)
    assert "'call_function' is no opcode" in message
    assert "placeholder, get_attr, call, output" in message


def test_node_tag_is_kept_in_meta():
    g = Graph()
    x = g.placeholder("x")
    assert x.tag is None
    x.tag = "front"
    assert x.tag == "front" and x.meta["tag"] == "front"
    assert g.copy().find_nodes(op="placeholder")[0].tag == "front"


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.activations = nn.ModuleDict({"snake_case": nn.ReLU(), "PascalCase": nn.ReLU(), "ALL_CAPS": nn.Tanh()})
        self.table = fxkit.tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32))

    def forward(self, x):
        a = self.activations["snake_case"](x)
        b = self.activations["PascalCase"](x)
        c = self.activations["ALL_CAPS"](x)
        return a + b + c + self.table


def test_names_are_snake_cased_like_torch_fx():
    gm = fxkit.symbolic_trace(Activations())
    names = {n.target: n.name for n in gm.graph.find_nodes(op="call") if type(n.target) is str}
    assert names == {"activations.snake_case": "activations_snake_case",
                     "activations.PascalCase": "activations_pascal_case",
                     "activations.ALL_CAPS": "activations_all_caps"}


def test_plain_tensor_attribute_is_read_under_its_own_name():
    model = Activations()
    gm = fxkit.symbolic_trace(model)
    assert [n.target for n in gm.graph.find_nodes(op="get_attr")] == ["table"]
    x = fxkit.tensor(np.array([-1.0, 0.5, 2.0], dtype=np.float32))
    np.testing.assert_allclose(gm(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_to_folder_writes_an_importable_module(tmp_path):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
            self.scale = nn.Parameter(fxkit.tensor(np.array([2.0, 3.0, 4.0], dtype=np.float32)))
            self.register_buffer("shift", fxkit.tensor(np.array([1.0, 0.0, -1.0], dtype=np.float32)))

        def forward(self, x):
            return self.seq(x) * self.scale + self.shift

    gm = fxkit.symbolic_trace(Model())
    gm.to_folder(str(tmp_path / "fx_folder_pkg"), "FxModule")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("fx_folder_pkg")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fx_folder_pkg.module", None)
        sys.modules.pop("fx_folder_pkg", None)
    rebuilt = module.FxModule()
    x = fxkit.tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    np.testing.assert_array_equal(rebuilt(x).numpy(), gm(x).numpy())
    assert set(rebuilt.state_dict()) == set(gm.state_dict())


def test_to_folder_refuses_what_it_cannot_write(tmp_path):
    def local_helper(x):
        return x + 1

    gm = fxkit.symbolic_trace(lambda x: fxkit.wrap(local_helper)(x))
    with pytest.raises(GraphError, match="cannot be imported from another file"):
        gm.to_folder(str(tmp_path / "out"))
