"""Graph editing: insertion points, erasing, copying, dead code, queries, pickling."""
import copy
import pickle

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, ops
from fxkit.graph import Graph, GraphModule
from tests.graph.builders import MyModule, my_module_graph, my_module_reference, randn


def _names(graph):
    return [n.name for n in graph.nodes]


def test_inserting_before_and_after_keep_creation_order():
    g = Graph()
    x = g.placeholder("x")
    out = g.call(ops.relu, (x,))
    g.output(out)
    with g.inserting_after(x):
        a = g.call(ops.neg, (x,))
        b = g.call(ops.exp, (a,))
    with g.inserting_before(out):
        c = g.call(ops.sin, (b,))
    d = g.call(ops.cos, (x,), name="at_end")
    assert _names(g) == ["x", "neg", "exp", "sin", "relu", "output", "at_end"]
    with g.inserting_before():
        g.placeholder("first")
    assert _names(g)[0] == "first"
    assert c.prev is b and d.prev.op == "output"


def test_erase_refuses_while_used():
    g = my_module_graph()
    add = g.find_nodes(target=ops.add)[0]
    with pytest.raises(GraphError, match=r"erase_node: %add still has users \(%linear\)"):
        g.erase_node(add)


def test_erase_while_iterating():
    g = Graph()
    x = g.placeholder("x")
    keep = x
    for _ in range(5):
        keep = g.call(ops.relu, (keep,))
        g.call(ops.neg, (x,))  # unused
    g.output(keep)
    visited = []
    for node in g.nodes:
        visited.append(node.name)
        if node.is_op(ops.neg):
            g.erase_node(node)
    assert len(visited) == 12
    assert not g.find_nodes(target=ops.neg) and len(g.nodes) == 7
    g.lint()


def test_erase_then_insert_at_anchor():
    g = Graph()
    x = g.placeholder("x")
    dead = g.call(ops.neg, (x,))
    g.output(x)
    with g.inserting_after(dead):
        g.erase_node(dead)
        new = g.call(ops.relu, (x,))
    assert _names(g) == ["x", "relu", "output"] and new.prev is x


def test_node_copy_and_graph_copy():
    g = my_module_graph()
    for node in g.nodes:
        node.meta["tag"] = node.name
    h = g.copy()
    assert str(h) == str(g)
    assert all(a is not b for a, b in zip(g.nodes, h.nodes))
    assert [n.meta["tag"] for n in h.nodes] == _names(g)
    h.lint()
    # editing the copy leaves the original alone
    h.find_nodes(target=ops.clamp)[0].target = ops.relu
    assert g.find_nodes(target=ops.clamp)


def test_graph_copy_inlines_into_another_graph():
    inner = Graph()
    a = inner.placeholder("a")
    inner.output(inner.call(ops.relu, (a,)))
    outer = Graph()
    x = outer.placeholder("x")
    result = outer.graph_copy(inner, {a: x})
    outer.output(result)
    assert str(outer) == "graph(x):\n    %x    = placeholder[x]\n    %relu = call[relu](%x)\n    return %relu"


def test_eliminate_dead_code_keeps_impure():
    g = Graph()
    x = g.placeholder("x")
    unused = g.placeholder("unused")
    g.call(ops.relu, (x,))
    g.call(ops.exp, (g.call(ops.neg, (x,)),))
    g.call(ops.setitem, (x, 0, 1.0))
    g.call(ops.rand, (3,))

    def log(v):
        return v

    log._fxkit_impure = True
    g.call(log, (x,))
    g.get_attr("w")
    g.output(x)
    assert g.eliminate_dead_code()
    assert _names(g) == ["x", "unused", "setitem", "rand", "log", "output"]
    assert not g.eliminate_dead_code()
    assert unused.graph is g


def test_find_nodes():
    g = my_module_graph()
    assert [n.name for n in g.find_nodes(op="call")] == ["add", "linear", "clamp"]
    assert [n.name for n in g.find_nodes(op="call", target="linear")] == ["linear"]
    assert [n.name for n in g.find_nodes(target=ops.clamp)] == ["clamp"]
    assert g.find_nodes(op="get_attr", target="missing") == []
    assert g.output_node().op == "output"


def test_move_nodes():
    g = Graph()
    x = g.placeholder("x")
    a = g.call(ops.neg, (x,))
    b = g.call(ops.exp, (x,))
    g.output((a, b))
    a.prepend(b)
    assert _names(g) == ["x", "exp", "neg", "output"]
    b.append(a)
    assert _names(g) == ["x", "exp", "neg", "output"]
    x.append(a)
    assert _names(g) == ["x", "neg", "exp", "output"]


def test_version_bumps_on_every_change():
    g = my_module_graph()
    node = g.find_nodes(target=ops.clamp)[0]
    versions = [g._version]
    node.kwargs = {"min": 0.5}
    versions.append(g._version)
    node.target = ops.relu
    versions.append(g._version)
    node.name = "renamed"
    versions.append(g._version)
    with g.inserting_before(node):
        g.call(ops.neg, (node.args[0],))
    versions.append(g._version)
    assert versions == sorted(set(versions))


@pytest.mark.parametrize("roundtrip", [copy.deepcopy, lambda g: pickle.loads(pickle.dumps(g))],
                         ids=["deepcopy", "pickle"])
def test_graph_roundtrip_preserves_structure_and_meta(roundtrip, rng):
    g = my_module_graph(with_stack=True)
    for node in g.nodes:
        node.meta["shape"] = (3, 4)
        node.meta["dtype"] = fxkit.float32
    h = roundtrip(g)
    assert str(h) == str(g)
    assert [n.meta for n in h.nodes] == [n.meta for n in g.nodes]
    for old, new in zip(g.nodes, h.nodes):
        assert [u.name for u in old.users] == [u.name for u in new.users]
    h.lint()
    model = MyModule()
    x = randn(rng, 3, 4)
    np.testing.assert_allclose(GraphModule(model, h)(x).numpy(), my_module_reference(model, x), rtol=1e-5, atol=1e-6)


def test_deep_graph_pickles_without_recursion():
    g = Graph()
    value = g.placeholder("x")
    for _ in range(3000):
        value = g.call(ops.neg, (value,))
    g.output(value)
    h = pickle.loads(pickle.dumps(g))
    assert len(h.nodes) == len(g.nodes)
