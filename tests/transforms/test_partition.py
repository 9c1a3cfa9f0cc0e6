"""`partition_by_support`: supported nodes in acyclic child modules, outputs and metadata kept."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import nn, ops
from fxkit.transforms import partition_by_support
from tests.tracer.paths import assert_same
from tests.transforms.random_graphs import dags


@fxkit.wrap
def python_step(x):
    """A free function kept as one node: the "unsupported" op of these tests."""
    return x * 2.0 + 1.0


class Sandwich(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x).relu()
        return self.b(python_step(h)).tanh()


def children_of(parent):
    return [name for name, _ in parent.named_children()]


def lint_all(parent):
    parent.graph.lint()
    for _, child in parent.named_children():
        child.graph.lint()


def test_an_unsupported_node_in_the_middle_splits_the_graph_in_two():
    model = Sandwich()
    gm = fxkit.symbolic_trace(model)
    parent = partition_by_support(gm, lambda node: node.target is not python_step)
    lint_all(parent)
    assert children_of(parent) == ["supported_0", "supported_1"]
    calls = [n.target if type(n.target) is str else n.target.__name__ for n in parent.graph.find_nodes(op="call")]
    assert calls == ["supported_0", "python_step", "supported_1"]
    assert "call[self.supported_0](%x)" in str(parent.graph)
    x = fxkit.randn(3, 4)
    assert_same(parent(x), model(x))


def test_node_metadata_survives_in_the_children():
    gm = fxkit.symbolic_trace(Sandwich())
    parent = partition_by_support(gm, lambda node: node.target is not python_step)
    relu = parent.supported_0.graph.find_nodes(op="call", target=ops.relu)[0]
    assert relu.meta["stack"].function == "forward" and relu.meta["stack"].line == "h = self.a(x).relu()"


def test_merging_never_creates_a_cycle_through_an_unsupported_node():
    # a -> u (unsupported) -> c and a -> c: a and c cannot share a partition.
    def f(x):
        a = x.relu()
        u = python_step(a)
        return a + u

    gm = fxkit.symbolic_trace(f)
    parent = partition_by_support(gm, lambda node: node.target is not python_step)
    lint_all(parent)
    assert children_of(parent) == ["supported_0", "supported_1"]
    x = fxkit.randn(5)
    assert_same(parent(x), f(x))


def test_independent_branches_join_one_partition_through_a_common_reader():
    def f(x):
        return x.relu() + x.tanh()

    parent = partition_by_support(fxkit.symbolic_trace(f), lambda node: True)
    assert children_of(parent) == ["supported_0"]


def test_nothing_supported_leaves_the_graph_as_it_was():
    gm = fxkit.symbolic_trace(Sandwich())
    parent = partition_by_support(gm, lambda node: False)
    assert children_of(parent) == ["a", "b"]
    x = fxkit.randn(2, 4)
    assert_same(parent(x), gm(x))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=dags(), data=st.data())
def test_random_graphs_with_random_markings_partition_into_acyclic_equal_graphs(program, data):
    gm = program.graph_module()
    calls = [n.name for n in gm.graph.nodes if n.op == "call"]
    unsupported = set(data.draw(st.lists(st.sampled_from(calls), unique=True), label="unsupported") if calls else [])
    parent = partition_by_support(gm, lambda node: node.name not in unsupported)
    lint_all(parent)
    for child_name in children_of(parent):
        child = parent.get_submodule(child_name)
        assert not {n.name for n in child.graph.nodes if n.op == "call"} & unsupported
    kept = {n.name for n in parent.graph.nodes if n.op == "call" and type(n.target) is not str}
    assert unsupported <= kept
    assert_same(parent(*program.inputs), program.expected)


def test_partitions_are_drawn_as_clusters_of_their_ops():
    from fxkit.graph.draw import to_dot

    parent = partition_by_support(fxkit.symbolic_trace(Sandwich()), lambda node: node.target is not python_step)
    text = str(to_dot(parent))
    assert 'label="self.supported_0 (partition)";' in text and 'label="self.supported_1 (partition)";' in text
    assert '"supported_0.relu" -> "python_step";' in text
    assert '"python_step" -> "supported_1.b";' in text


def test_partitions_made_after_merges_get_fresh_names():
    # a, b and c start three partitions; d merges a's and b's; e's partition must not reuse c's id.
    def f(x):
        a = x.relu()
        b = python_step(x).tanh()
        c = python_step(x * 3.0).neg()
        d = a + b
        e = python_step(d).exp()
        return e, c

    parent = partition_by_support(fxkit.symbolic_trace(f), lambda node: node.target is not python_step)
    lint_all(parent)
    x = fxkit.randn(6)
    assert_same(parent(x), f(x))
    assert children_of(parent) == ["supported_0", "supported_1", "supported_2", "supported_3"]
