"""Node: fields, users bookkeeping, replacing uses, matching, names, nested args."""
import collections

import pytest

from fxkit import GraphError, nn, ops
from fxkit.graph import Graph, GraphModule, SourceLocation, map_aggregate, map_arg
from tests.graph.builders import MyModule, my_module_graph


def _nodes(graph):
    return {n.name: n for n in graph.nodes}


def test_fields_and_repr():
    n = _nodes(my_module_graph())
    add = n["add"]
    assert (add.op, add.target, add.args, add.kwargs) == ("call", ops.add, (n["x"], n["param"]), {})
    assert repr(add) == "%add"
    assert add.format_node() == "%add = call[add](%x, %param)"
    assert n["clamp"].format_node() == "%clamp = call[clamp](%linear, min=0.0, max=1.0)"
    assert n["linear"].format_node() == "%linear = call[self.linear](%add)"
    assert n["output"].format_node() == "return %clamp"
    assert add.prev is n["param"] and add.next is n["linear"]
    assert add.all_input_nodes == [n["x"], n["param"]]


def test_users_follow_args_and_kwargs():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    add = g.call(ops.add, (x, x))
    assert list(x.users) == [add] and not y.users
    add.args = (y, {"k": [x, slice(None, y)]})
    assert list(x.users) == [add] and list(y.users) == [add]
    add.args = (y, 1)
    assert not x.users and list(y.users) == [add]
    add.kwargs = {"alpha": x}
    assert list(x.users) == [add]
    assert add.all_input_nodes == [y, x]
    add.update_arg(1, x)
    add.update_kwarg("alpha", 2)
    assert add.args == (y, x) and add.kwargs == {"alpha": 2}


def test_replace_all_uses_with():
    g = Graph()
    x = g.placeholder("x")
    relu = g.call(ops.relu, (x,))
    neg = g.call(ops.neg, (x,))
    g.output((relu, neg))
    with g.inserting_after(x):
        gelu = g.call(ops.gelu, (x,))
    x.meta["stack"] = "here"
    changed = x.replace_all_uses_with(gelu, propagate_meta=True)
    assert changed == [relu, neg]  # gelu itself keeps reading x
    assert gelu.args == (x,) and relu.args == (gelu,) and list(x.users) == [gelu]
    assert gelu.meta["stack"] == "here"


def test_replace_all_uses_with_filter():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call(ops.relu, (x,))
    b = g.call(ops.neg, (x,))
    assert x.replace_all_uses_with(y, delete_user_cb=lambda user: user is b) == [b]
    assert a.args == (x,) and b.args == (y,)


def test_replace_input_with_nested():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    cat = g.call(ops.cat, ([x, y, x],), {"dim": 0})
    cat.replace_input_with(x, y)
    assert cat.args == ([y, y, y],) and not x.users


def test_is_op_and_is_module():
    model = MyModule()
    gm = GraphModule(model, my_module_graph())
    n = _nodes(gm.graph)
    assert n["add"].is_op(ops.add) and n["add"].is_op("add")
    assert not n["add"].is_op(ops.mul) and not n["x"].is_op(ops.add)
    assert n["linear"].is_module(gm, nn.Linear)
    assert not n["linear"].is_module(gm, nn.Conv2d)
    assert not n["add"].is_module(gm, nn.Linear)


def test_stack_property():
    loc = SourceLocation("model.py", 3, "forward", "y = x + 1")
    n = _nodes(my_module_graph())["add"]
    assert n.stack is None
    n.meta["stack"] = loc
    assert n.stack is loc
    assert str(loc) == "model.py:3 in forward: y = x + 1"


def test_names_are_unique_identifiers_from_targets():
    g = Graph()
    x = g.placeholder("x")
    w = g.get_attr("layer1.0.conv1.weight")
    c = g.call("layer1.0.conv1", (x,))
    a1, a2, a3 = (g.call(ops.add, (x, 1)) for _ in range(3))

    def my_function(v):
        return v

    f = g.call(my_function, (x,))
    kw = g.call(ops.relu, (x,), name="return")
    me = g.placeholder("self")
    assert [w.name, c.name, a1.name, a2.name, a3.name, f.name] == [
        "layer1_0_conv1_weight", "layer1_0_conv1", "add", "add_1", "add_2", "my_function"]
    assert kw.name == "return_1" and me.name == "self_1" and me.target == "self"


def test_rename_goes_through_the_namespace():
    g = Graph()
    x = g.placeholder("x")
    y = g.call(ops.relu, (x,))
    y.name = "x"
    assert y.name == "x_1"
    y.name = "a b"
    assert y.name == "a_b"


def test_map_arg_and_map_aggregate():
    g = Graph()
    x = g.placeholder("x")
    Pair = collections.namedtuple("Pair", "a b")
    value = (x, [1, {"k": x}], slice(x, 2), Pair(x, 3))
    mapped = map_arg(value, lambda n: n.name)
    assert mapped == ("x", [1, {"k": "x"}], slice("x", 2, None), Pair("x", 3))
    assert type(mapped[3]) is Pair
    assert map_aggregate([1, (2, 3)], lambda v: v * 10) == [10, (20, 30)]


def test_is_impure():
    g = Graph()
    x = g.placeholder("x")
    assert g.call(ops.setitem, (x, 0, 1.0)).is_impure()
    assert g.call(ops.rand, (3,)).is_impure()
    assert not g.call(ops.relu, (x,)).is_impure()

    def effect(v):
        return v

    effect._fxkit_impure = True
    assert g.call(effect, (x,)).is_impure()
    assert x.is_impure()


def test_bad_opcode_and_target_rejected():
    g = Graph()
    with pytest.raises(GraphError, match="unknown opcode 'call_method'"):
        g.create_node("call_method", "relu")
    with pytest.raises(GraphError, match="target must be an Op, a callable or a submodule"):
        g.call(42, ())
