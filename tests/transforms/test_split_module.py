"""`split_module`: outputs kept bit for bit, parameters owned once, crossing values explicit."""
import copy
import pickle

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import GraphError
from fxkit.transforms.split_module import split_module
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import zoo_model, zoo_params


def by_position(gm, k):
    """Partition function: the call nodes in order, cut into ``k`` runs of about equal length."""
    calls = [n for n in gm.graph.nodes if n.op == "call"]
    index = {n: i * k // len(calls) for i, n in enumerate(calls)}
    return index.__getitem__


def lint_all(parent):
    parent.graph.lint()
    for _, child in parent.named_children():
        child.graph.lint()


@pytest.mark.parametrize("name", zoo_params())
@pytest.mark.parametrize("k", [2, 3, 4])
def test_zoo_split_equals_unsplit_and_owns_each_parameter_once(name, k):
    model, inputs = zoo_model(name)
    gm = fxkit.symbolic_trace(model)
    parent = split_module(gm, by_position(gm, k))
    lint_all(parent)
    assert_same(parent(*inputs), model(*inputs), f"{name} split in {k}")
    children = [parent.get_submodule(n.target) for n in parent.graph.find_nodes(op="call")
                if type(n.target) is str]
    assert len(children) == k
    owned = [id(p) for child in children for p in child.parameters()]
    assert len(owned) == len(set(owned)), "a parameter is owned by two children"
    assert set(owned) == {id(p) for p in model.parameters()}, "a parameter was lost"


class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        g = self.b(h).relu()
        return self.c(g) + h, x * 2


def test_skip_connection_is_an_explicit_output_and_input():
    gm = fxkit.symbolic_trace(Skip())
    keys = {"a": 0, "b": 1, "relu": 1, "c": 2, "add": 2, "mul": 2}
    parent = split_module(gm, lambda n: keys[n.name])
    x = fxkit.randn(3, 4)
    assert_same(parent(x), gm(x))
    first, second, third = (parent.get_submodule(f"submod_{i}") for i in range(3))
    assert [n.name for n in first.graph.find_nodes(op="placeholder")] == ["x"]
    # h (from the first child) and x (a graph input) reach the last child as inputs.
    assert [n.name for n in third.graph.find_nodes(op="placeholder")] == ["x", "a", "relu"]
    assert [n.name for n in second.graph.find_nodes(op="placeholder")] == ["a"]
    last_call = parent.graph.find_nodes(op="call", target="submod_2")[0]
    assert [a.name for a in last_call.args] == ["x", "submod_0", "submod_1"]


def test_partitions_run_in_data_flow_order_whatever_their_keys():
    gm = fxkit.symbolic_trace(Skip())
    keys = {"a": "z-first", "b": "m-second", "relu": "m-second", "c": "a-last", "add": "a-last", "mul": "a-last"}
    parent = split_module(gm, lambda n: keys[n.name])
    calls = [n for n in parent.graph.find_nodes(op="call") if type(n.target) is str]
    assert [n.meta["partition"] for n in calls] == ["z-first", "m-second", "a-last"]
    x = fxkit.randn(2, 4)
    assert_same(parent(x), gm(x))


def test_partitions_depending_on_each_other_are_refused_naming_the_nodes():
    gm = fxkit.symbolic_trace(Skip())
    keys = {"a": 0, "b": 1, "relu": 0, "c": 1, "add": 1, "mul": 1}
    with pytest.raises(GraphError, match=r"cycle.*%relu = call\[relu\]\(%b\).*reads %b"):
        split_module(gm, lambda n: keys[n.name])


def test_partition_fn_must_name_a_partition():
    gm = fxkit.symbolic_trace(Skip())
    with pytest.raises(GraphError, match=r"partition_fn returned None for %a = call\[self.a\]\(%x\)"):
        split_module(gm, lambda n: None)


class SharedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.fc(x).relu())


def test_a_module_with_parameters_called_from_two_partitions_is_refused():
    gm = fxkit.symbolic_trace(SharedLayer())
    calls = [n for n in gm.graph.nodes if n.op == "call"]
    with pytest.raises(GraphError, match=r"'fc.weight' would be owned by both submod_0 and submod_1"):
        split_module(gm, lambda n: 0 if n is calls[0] else 1)


class SharedWeight(nn.Module):
    """Reads one parameter in two places (tied weights), through get_attr."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(4, 4))

    def forward(self, x):
        h = (x @ self.w).relu()
        return h @ self.w


def test_a_parameter_read_in_two_partitions_lives_in_the_first_and_is_passed_on():
    model = SharedWeight()
    gm = fxkit.symbolic_trace(model)
    matmuls = [n for n in gm.graph.nodes if n.op == "call" and n.is_op("matmul")]
    parent = split_module(gm, lambda n: 1 if n is matmuls[1] else 0)
    x = fxkit.randn(3, 4)
    assert_same(parent(x), model(x))
    assert [name for name, _ in parent.named_parameters()] == ["submod_0.w"]
    second = parent.get_submodule("submod_1")
    assert [n.name for n in second.graph.find_nodes(op="placeholder")] == ["w", "relu"]


def test_a_stateless_module_may_be_called_from_several_partitions():
    model, inputs = zoo_model("resnet18")
    gm = fxkit.symbolic_trace(model)
    # layer1.0.relu is called twice; cut between its two calls.
    relus = [n for n in gm.graph.nodes if n.op == "call" and n.target == "layer1.0.relu"]
    cut = list(gm.graph.nodes).index(relus[1])
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    parent = split_module(gm, lambda n: int(order[n] >= cut))
    assert_same(parent(*inputs), model(*inputs))


def test_split_parent_copies_pickles_and_prints_readably():
    gm = fxkit.symbolic_trace(Skip())
    parent = split_module(gm, by_position(gm, 2))
    x = fxkit.randn(2, 4)
    expected = gm(x)
    assert_same(copy.deepcopy(parent)(x), expected)
    assert_same(pickle.loads(pickle.dumps(parent))(x), expected)
    text = parent.print_readable(print_output=False)
    assert "class submod_0(fxkit.nn.Module):" in text and "class submod_1(fxkit.nn.Module):" in text


def test_graph_inputs_with_defaults_and_dict_outputs_survive():
    def f(x, scale=2.0):
        y = x.relu() * scale
        return {"y": y, "z": (y + x).sum(1)}

    gm = fxkit.symbolic_trace(f)
    parent = split_module(gm, by_position(gm, 2))
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32))
    assert_same(parent(x), gm(x))
    assert_same(parent(x, 3.0), gm(x, 3.0))


# -- torch.fx's calling convention: split_module(m, root_m, split_callback, ...) ------------------------
def test_torch_form_shares_a_module_called_from_two_partitions_and_maps_its_names():
    model = SharedLayer()
    gm = fxkit.symbolic_trace(model)
    calls = [n for n in gm.graph.nodes if n.op == "call"]
    qualname_map = {}
    parent = split_module(gm, model, lambda n: 5 if n is calls[0] else 7, qualname_map)
    x = fxkit.randn(3, 4)
    assert_same(parent(x), model(x))
    assert [name for name, _ in parent.named_children()] == ["submod_5", "submod_7"]
    assert parent.submod_5.fc is parent.submod_7.fc is model.fc
    assert qualname_map == {"submod_5.fc": "fc", "submod_7.fc": "fc"}


def test_torch_form_flattens_dotted_module_paths_and_keeps_get_attrs_in_the_parent():
    model, inputs = zoo_model("resnet18")
    gm = fxkit.symbolic_trace(model)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    half = len(order) // 2
    qualname_map = {}
    parent = split_module(gm, None, lambda n: int(order[n] >= half), qualname_map=qualname_map, tuple_return=True)
    assert_same(parent(*inputs), model(*inputs))
    assert qualname_map["submod_0.layer1_0_conv1"] == "layer1.0.conv1"
    for _, child in parent.named_children():
        assert not list(child.graph.find_nodes(op="get_attr"))
        assert isinstance(child.graph.output_node().args[0], tuple)


def test_torch_form_refuses_a_root_that_is_no_module_and_flags_that_are_no_bools():
    gm = fxkit.symbolic_trace(Skip())
    with pytest.raises(GraphError, match=r"root_m must be an fxkit.nn.Module or None, got str"):
        split_module(gm, root_m="model", split_callback=lambda n: 0)
    with pytest.raises(GraphError, match=r"tuple_return must be True or False, got 1"):
        split_module(gm, None, lambda n: 0, tuple_return=1)
