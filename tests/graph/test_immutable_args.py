"""A node's list and dict arguments refuse in-place edits; lint walks the arguments themselves.

Regression (issue 15): ``cat.args[0].append(neg)`` skipped the users bookkeeping,
lint passed, dead-code elimination erased the used ``neg`` and codegen crashed.
"""
import copy
import pickle

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, ops
from fxkit.graph import Graph, GraphModule
from fxkit.graph.immutable import ImmutableDict, ImmutableList


def _cat_graph():
    g = Graph()
    x = g.placeholder("x")
    neg = g.call(ops.neg, (x,))
    cat = g.call(ops.cat, ([x, x],), {"dim": 0})
    g.output(cat)
    return g, x, neg, cat


@pytest.mark.parametrize("edit", [
    lambda cat, neg: cat.args[0].append(neg),
    lambda cat, neg: cat.args[0].__setitem__(0, neg),
    lambda cat, neg: cat.args[0].extend([neg]),
    lambda cat, neg: cat.args[0].insert(0, neg),
    lambda cat, neg: cat.args[0].pop(),
    lambda cat, neg: cat.args[0].__delitem__(0),
    lambda cat, neg: cat.args[0].sort(),
    lambda cat, neg: cat.kwargs.__setitem__("dim", neg),
    lambda cat, neg: cat.kwargs.update(dim=1),
    lambda cat, neg: cat.kwargs.pop("dim"),
    lambda cat, neg: cat.kwargs.clear(),
])
def test_argument_containers_refuse_edits(edit):
    g, x, neg, cat = _cat_graph()
    with pytest.raises(GraphError) as info:
        edit(cat, neg)
    message = str(info.value)
    assert "node.args = " in message and "update_arg" in message and "replace_input_with" in message
    assert cat.args == ([x, x],) and cat.kwargs == {"dim": 0}
    assert not neg.users


def test_edits_through_the_node_keep_users_in_step():
    g, x, neg, cat = _cat_graph()
    cat.args = ([x, neg],)
    assert list(neg.users) == [cat] and isinstance(cat.args[0], ImmutableList)
    cat.update_kwarg("dim", 1)
    assert isinstance(cat.kwargs, ImmutableDict) and cat.kwargs == {"dim": 1}
    g.lint()
    assert not g.eliminate_dead_code()  # neg is read by cat: nothing is dead
    gm = GraphModule(fxkit.nn.Module(), g)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(gm(fxkit.tensor(a)).numpy(), np.concatenate([a, -a], axis=1))


def test_nested_containers_are_immutable_and_read_like_plain_ones():
    g = Graph()
    x = g.placeholder("x")
    node = g.call(ops.cat, ((x, [x, {"k": [x]}]),))
    inner = node.args[0][1]
    assert isinstance(inner, ImmutableList) and isinstance(inner[1], ImmutableDict)
    assert isinstance(inner[1]["k"], ImmutableList)
    assert inner == [x, {"k": [x]}] and list(inner) == [x, {"k": [x]}]
    with pytest.raises(GraphError):
        inner[1]["k"].append(x)


def test_arguments_survive_copy_deepcopy_and_pickle():
    g, x, neg, cat = _cat_graph()
    for copied in (copy.deepcopy(g), pickle.loads(pickle.dumps(g)), g.copy()):
        new_cat = copied.find_nodes(op="call", target=ops.cat)[0]
        assert isinstance(new_cat.args[0], ImmutableList) and isinstance(new_cat.kwargs, ImmutableDict)
        copied.lint()
    assert pickle.loads(pickle.dumps(ImmutableList([1, [2]]))) == [1, [2]]
    assert copy.copy(cat.args[0]) is cat.args[0]


def test_lint_walks_the_arguments_not_a_cached_set():
    g, x, neg, cat = _cat_graph()
    list.append(cat.args[0], neg)  # an edit that bypasses the node on purpose
    with pytest.raises(GraphError) as info:
        g.lint()
    assert "%cat reads %neg but is missing from its users" in str(info.value)
    assert "node.args" in str(info.value)


def test_lint_reports_an_input_the_arguments_no_longer_read():
    g, x, neg, cat = _cat_graph()
    cat.args = ([x, neg],)
    list.__setitem__(cat.args[0], 1, x)
    with pytest.raises(GraphError, match="lists %neg as an input, but its arguments do not read it"):
        g.lint()
