"""GraphModule: attribute copying, generated forward, lazy recompilation, printing,
submodule editing, deepcopy and pickling."""
import copy
import inspect
import pickle
import traceback

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, nn, ops
from fxkit.graph import Graph, GraphModule
from tests.graph.builders import MyModule, my_module_graph, my_module_reference, randn


def test_forward_matches_reference(rng, device):
    model = MyModule()
    x = randn(rng, 3, 4)
    expected = my_module_reference(model, x)
    model.to(device)
    gm = GraphModule(model, my_module_graph())
    x = x.to(device)
    np.testing.assert_allclose(gm(x).cpu().numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(gm(x).cpu().numpy(), model(x).cpu().numpy())  # same ops, same order


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.unused = nn.Linear(4, 4)
        self.register_buffer("scale", fxkit.rand(4))
        self.register_buffer("scratch", fxkit.rand(4), persistent=False)
        self.extra = nn.Parameter(fxkit.rand(4))

    def forward(self, x):
        return self.layer1[1](x) * self.scale + self.scratch


def _nested_graph():
    g = Graph()
    x = g.placeholder("x")
    y = g.call("layer1.1", (x,))
    y = g.call(ops.mul, (y, g.get_attr("scale")))
    g.output(g.call(ops.add, (y, g.get_attr("scratch"))))
    return g


def test_copies_only_what_the_graph_references(rng):
    model = Nested()
    gm = GraphModule(model, _nested_graph())
    assert sorted(name for name, _ in gm.named_modules()) == ["", "layer1", "layer1.1"]
    assert type(gm.layer1) is nn.Module  # a plain container, not the Sequential
    assert gm.get_submodule("layer1.1") is model.layer1[1]
    assert [name for name, _ in gm.named_parameters()] == ["layer1.1.weight", "layer1.1.bias"]
    assert sorted(gm.state_dict()) == ["layer1.1.bias", "layer1.1.weight", "scale"]  # scratch stays non-persistent
    x = randn(rng, 2, 4)
    np.testing.assert_array_equal(gm(x).numpy(), model(x).numpy())
    assert "getattr(self.layer1, '1')(x)" in gm.code


def test_dict_root(rng):
    linear = nn.Linear(4, 5)
    param = nn.Parameter(fxkit.rand(3, 4))
    gm = GraphModule({"linear": linear, "param": param}, my_module_graph())
    x = randn(rng, 3, 4)
    expected = np.clip((x.numpy() + param.numpy()) @ linear.weight.numpy().T + linear.bias.numpy(), 0, 1)
    np.testing.assert_allclose(gm(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(GraphError, match=r"needs 'param', which the root dict does not hold"):
        GraphModule({"linear": linear}, my_module_graph())


def test_missing_root_attribute():
    g = my_module_graph()
    g.find_nodes(op="get_attr")[0].target = "linear.scale"
    with pytest.raises(GraphError, match=r"node %param = get_attr\[linear.scale\] needs 'linear.scale', which the "
                                         r"root module does not have"):
        GraphModule(MyModule(), g)


def test_each_instance_has_its_own_class():
    a = GraphModule(MyModule(), my_module_graph(), class_name="First")
    b = GraphModule(MyModule(), my_module_graph())
    assert type(a) is not type(b) and isinstance(a, GraphModule) and isinstance(b, nn.Module)
    assert type(a).__name__ == "First" and type(b).__name__ == "GraphModule"
    assert "_generated_forward" in type(a).__dict__
    assert inspect.signature(a.forward).parameters.keys() == {"x"}


def test_lazy_recompile(rng):
    model = MyModule()
    gm = GraphModule(model, my_module_graph())
    first = gm.__dict__["_python_code"]
    clamp = gm.graph.find_nodes(target=ops.clamp)[0]
    with gm.graph.inserting_after(clamp):
        neg = gm.graph.call(ops.neg, (clamp,))
    clamp.replace_all_uses_with(neg)
    clamp.kwargs = {"min": 0.25, "max": 0.5}
    assert gm.__dict__["_python_code"] is first  # edits alone regenerate nothing
    x = randn(rng, 3, 4)
    expected = -np.clip((x.numpy() + model.param.numpy()) @ model.linear.weight.numpy().T
                        + model.linear.bias.numpy(), 0.25, 0.5)
    np.testing.assert_allclose(gm(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    second = gm.__dict__["_python_code"]
    assert second is not first and "neg = -clamp" in gm.code
    gm(x)
    assert gm.__dict__["_python_code"] is second  # unchanged graph: no regeneration


def test_reading_code_and_forward_regenerate():
    gm = GraphModule(MyModule(), my_module_graph())
    gm.graph.find_nodes(target=ops.clamp)[0].target = ops.relu
    assert "clamp = ops.relu(linear, min=0.0, max=1.0)" in gm.code
    gm.graph = my_module_graph()
    assert gm.forward.__func__ is type(gm)._generated_forward
    assert "clamp = ops.clamp" in inspect.getsource(gm.forward)


def test_recompile_returns_the_code():
    gm = GraphModule(MyModule(), my_module_graph())
    code = gm.recompile()
    assert code.src == gm.code


def test_traceback_shows_generated_line(rng):
    def explode(value):
        raise ValueError("boom")

    g = my_module_graph()
    add = g.find_nodes(target=ops.add)[0]
    with g.inserting_after(add):
        g.call(explode, (add,))
    gm = GraphModule(MyModule(), g)
    with pytest.raises(ValueError, match="boom") as info:
        gm(randn(rng, 3, 4))
    frames = traceback.extract_tb(info.tb)
    generated = [f for f in frames if f.name == "forward" and "fxkit-generated" in f.filename]
    assert generated and generated[0].line == "explode = explode_1(add)"


def test_print_readable_with_shapes():
    g = my_module_graph()
    for node, shape in zip(g.nodes, [(3, 4), (3, 4), (3, 4), (3, 5), (3, 5)]):
        node.meta.update(shape=shape, dtype=fxkit.float32)
    gm = GraphModule(MyModule(), g, class_name="MyModule")
    text = gm.print_readable(print_output=False)
    assert text == (
        "class MyModule(fxkit.nn.Module):\n"
        "    def forward(self, x):\n"
        "        param = self.param  # f32[3, 4]\n"
        "        add = x + param  # f32[3, 4]\n"
        "        x = param = None\n"
        "        linear = self.linear(add)  # f32[3, 5]\n"
        "        add = None\n"
        "        clamp = ops.clamp(linear, min=0.0, max=1.0)  # f32[3, 5]\n"
        "        linear = None\n"
        "        return clamp")


def test_print_readable_nests_graph_modules(capsys):
    inner = GraphModule(MyModule(), my_module_graph(), class_name="Inner")
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call("inner", (x,)))
    outer = GraphModule({"inner": inner}, g, class_name="Outer")
    text = outer.print_readable()
    assert capsys.readouterr().out.rstrip("\n") == text
    assert text.startswith("class Outer(fxkit.nn.Module):\n    def forward(self, x):\n        inner = self.inner(x)")
    assert "\n    class inner(fxkit.nn.Module):\n        def forward(self, x):\n            param = self.param" in text


def test_add_delete_get_submodule(rng):
    gm = GraphModule(MyModule(), my_module_graph())
    relu = nn.ReLU()
    assert gm.add_submodule("post.act", relu)
    assert gm.get_submodule("post.act") is relu and type(gm.post) is nn.Module
    clamp = gm.graph.find_nodes(target=ops.clamp)[0]
    with gm.graph.inserting_after(clamp):
        act = gm.graph.call("post.act", (clamp,))
    clamp.replace_all_uses_with(act)
    gm.graph.lint()
    x = randn(rng, 3, 4)
    assert gm(x).shape == (3, 5)
    assert "post_act = self.post.act(clamp)" in gm.code
    assert not gm.add_submodule("param.inner", nn.ReLU())  # a parameter blocks the path
    assert gm.delete_submodule("post.act") and not gm.delete_submodule("post.act")
    with pytest.raises(GraphError, match="calls the submodule 'post.act', which the module does not have"):
        gm.graph.lint()


def test_delete_all_unused_submodules():
    model = Nested()
    g = _nested_graph()
    gm = GraphModule(model, g)
    gm.add_submodule("spare.deep", nn.ReLU())
    gm.delete_all_unused_submodules()
    assert sorted(name for name, _ in gm.named_modules()) == ["", "layer1", "layer1.1"]


class Scaled(GraphModule):
    """A user subclass: pickling and deepcopy must keep it."""


@pytest.mark.parametrize("roundtrip", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))],
                         ids=["deepcopy", "pickle"])
def test_copy_and_pickle_regenerate_code(roundtrip, rng):
    model = MyModule()
    gm = Scaled(model, my_module_graph(with_stack=True), class_name="Traced")
    gm.eval()
    clone = roundtrip(gm)
    assert isinstance(clone, Scaled) and type(clone).__name__ == "Traced" and type(clone) is not type(gm)
    assert clone.code == gm.code and str(clone.graph) == str(gm.graph) and not clone.training
    assert clone.graph.owning_module is clone and clone.graph is not gm.graph
    assert clone.graph.find_nodes(target=ops.add)[0].stack == gm.graph.find_nodes(target=ops.add)[0].stack
    x = randn(rng, 3, 4)
    np.testing.assert_allclose(clone(x).numpy(), my_module_reference(model, x), rtol=1e-5, atol=1e-6)
    clone.param.numpy()[...] = 0  # the copy owns its own parameters
    assert not np.all(model.param.numpy() == 0)


def test_pickle_does_not_store_generated_functions():
    data = pickle.dumps(GraphModule(MyModule(), my_module_graph()))
    assert b"_generated_forward" not in data and b"def forward" not in data


def test_str_shows_module_and_code():
    text = str(GraphModule(MyModule(), my_module_graph()))
    assert text.startswith("GraphModule(\n  (linear): Linear(in_features=4, out_features=5, bias=True)\n)")
    assert "def forward(self, x):" in text


def test_bad_root_and_graph():
    with pytest.raises(GraphError, match="root must be an fxkit.nn.Module or a dict, got list"):
        GraphModule([], my_module_graph())
    gm = GraphModule(MyModule(), my_module_graph())
    with pytest.raises(GraphError, match="GraphModule.graph must be a Graph, got str"):
        gm.graph = "graph"
