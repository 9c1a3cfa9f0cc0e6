"""Pass API torch.fx code uses: DCE's is_impure_node, replace_pattern_with_filters,
PassManager checks, split_by_tags."""
import numpy as np
import pytest

import fxkit
from fxkit import GraphError, nn, ops
from fxkit.graph import Node
from fxkit.transforms import (PassManager, eliminate_dead_code, replace_pattern, replace_pattern_with_filters,
                              split_by_tags)


def _x(*shape, seed=0):
    return fxkit.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_dead_code_pass_takes_is_impure_node():
    def f(x):
        x.neg()
        x.relu()
        return x + 1

    gm = fxkit.symbolic_trace(f)
    eliminate_dead_code(gm, is_impure_node=lambda n: n.is_op(ops.neg))
    assert [n.target.name for n in gm.graph.find_nodes(op="call")] == ["neg", "add"]


def test_match_filters_keep_only_accepted_matches():
    def pattern(x):
        return x + 1

    def replacement(x):
        return x - 1

    def reads_a_placeholder(match, graph, pattern_graph):
        return all(isinstance(n, Node) and n.op == "placeholder" for n in match.placeholder_nodes)

    gm = fxkit.symbolic_trace(lambda x: (x + 1) + 1)
    replaced = replace_pattern_with_filters(gm, pattern, replacement, [reads_a_placeholder])
    assert len(replaced) == 1
    x = _x(3)
    np.testing.assert_allclose(gm(x).numpy(), x.numpy().astype(np.float64) - 1 + 1, rtol=1e-6)

    seen = []
    gm = fxkit.symbolic_trace(lambda x: (x + 1) + 1)
    replace_pattern_with_filters(gm, pattern, replacement, [lambda m, g, p: seen.append((g, p)) or False])
    assert seen and seen[0][0] is gm.graph and all(p is not gm.graph for _, p in seen)
    assert len(gm.graph.find_nodes(op="call", target=ops.add)) == 2  # every match filtered out


def test_ignore_literals_matches_any_constant():
    def pattern(x):
        return x.mul(2.0).relu()

    def replacement(x):
        return x.abs()

    gm = fxkit.symbolic_trace(lambda x: x.mul(3.0).relu() + x.mul(5.0).relu())
    assert replace_pattern(gm, pattern, replacement) == []
    assert len(replace_pattern_with_filters(gm, pattern, replacement, ignore_literals=True)) == 2
    x = _x(4)
    np.testing.assert_allclose(gm(x).numpy(), 2 * np.abs(x.numpy()), rtol=1e-6)
    gm = fxkit.symbolic_trace(lambda x, y: x.mul(y).relu())
    assert replace_pattern_with_filters(gm, pattern, replacement, ignore_literals=True) == []  # a node is no literal


def test_pass_manager_runs_checks_after_each_pass():
    calls = []

    def no_relu(gm):
        calls.append(len(gm.graph.nodes))
        if gm.graph.find_nodes(op="call", target=ops.relu):
            raise ValueError("relu is not allowed here")

    def add_relu(gm):
        out = gm.graph.output_node()
        with gm.graph.inserting_before(out):
            relu = gm.graph.call(ops.relu, (out.args[0],))
        out.args = (relu,)
        return gm

    gm = fxkit.symbolic_trace(lambda x: x.neg())
    pm = PassManager([eliminate_dead_code], checks=[no_relu])
    pm(gm)
    assert calls == [3, 3]  # on the input, then after the pass
    pm.add_pass(add_relu)
    with pytest.raises(ValueError, match="relu is not allowed here") as info:
        pm(gm)
    assert "PassManager: check 'no_relu' failed after pass 'add_relu'" in info.value.__notes__
    late = PassManager([])
    late.add_checks(no_relu)
    with pytest.raises(fxkit.errors.PassError, match="a check is called as check\\(graph_module\\)"):
        late.add_checks(lambda gm, extra: None)


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        y = self.a(x)
        return self.b(y.relu()) + 1, y


def test_split_by_tags_names_children_after_tags():
    gm = fxkit.symbolic_trace(TwoLayers())
    for node in gm.graph.find_nodes(op="call"):
        node.tag = "front" if node.target == "a" else "back"
    parent = split_by_tags(gm, ["front", "back"])
    assert [n.target for n in parent.graph.find_nodes(op="call") if type(n.target) is str] == ["front", "back"]
    assert [n.target for n in parent.front.graph.find_nodes(op="call")] == ["a"]
    assert set(dict(parent.back.named_children())) == {"b"}
    x = _x(3, 4)
    for got, want in zip(parent(x), gm(x)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_split_by_tags_refuses_untagged_nodes():
    gm = fxkit.symbolic_trace(TwoLayers())
    with pytest.raises(GraphError, match="has the tag None, which is not one of"):
        split_by_tags(gm, ["front"])
    with pytest.raises(GraphError, match="is no valid identifier"):
        split_by_tags(gm, ["not valid"])
