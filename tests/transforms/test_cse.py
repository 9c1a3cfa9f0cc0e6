"""eliminate_common_subexpressions: equal pure expressions merge after canonicalising,
impure ops and values written in place never do; outputs stay equal on the zoo and on random graphs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.graph import Graph, GraphModule
from fxkit.transforms import EliminateCommonSubexpressions, eliminate_common_subexpressions
from fxkit.transforms.cse import expression_key
from fxkit.transforms.effects import is_pure, written_nodes
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params
from tests.transforms.random_graphs import dags

RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def calls(gm):
    return [n.target.name if hasattr(n.target, "name") else n.target for n in gm.graph.nodes if n.op == "call"]


def cse(fn):
    gm = eliminate_common_subexpressions(fxkit.symbolic_trace(fn))
    gm.graph.lint()
    return gm


def test_equal_expressions_merge(rng):
    def f(x):
        return ops.relu(x) + ops.relu(x)

    gm = cse(f)
    assert str(gm.graph) == (
        "graph(x):\n"
        "    %x    = placeholder[x]\n"
        "    %relu = call[relu](%x)\n"
        "    %add  = call[add](%relu, %relu)\n"
        "    return %add")
    x = randn(rng, 3, 4)
    a = np.maximum(x.numpy().astype(np.float64), 0)
    np.testing.assert_allclose(gm(x).numpy(), a + a)


def test_chains_merge_as_a_whole(rng):
    def f(x, y):
        return (x * y).exp().sum(1) - (x * y).exp().sum(1)

    gm = cse(f)
    assert calls(gm) == ["mul", "exp", "sum", "sub"]
    x, y = randn(rng, 2, 3), randn(rng, 2, 3)
    np.testing.assert_array_equal(gm(x, y).numpy(), np.zeros(2, np.float32))


def test_arguments_are_canonicalised_against_the_op_signature(rng):
    def f(x):
        return x.sum(1) + x.sum(dim=1) + ops.sum(x, 1, keepdim=False) + x.sum(1, keepdim=True)

    gm = cse(f)
    assert calls(gm) == ["sum", "add", "add", "sum", "add"]
    x = randn(rng, 2, 3)
    a = x.numpy().astype(np.float64)
    magnitude = 4 * np.abs(a).sum()  # the float32 sums' error scales with sum|x| when the terms nearly cancel
    np.testing.assert_allclose(gm(x).numpy(), 3 * a.sum(1) + a.sum(1, keepdims=True), rtol=1e-5, atol=1e-6 * magnitude)


def test_constants_compare_by_type_and_exact_value(rng):
    def f(x):
        return (x * 0.0, x * -0.0, x + 1, x + 1.0, x + True, x + 1)

    gm = cse(f)
    assert calls(gm) == ["mul", "mul", "add", "add", "add"]
    x = randn(rng, 3)
    out = gm(x)
    assert np.signbit(out[1].numpy()[x.numpy() > 0]).all()
    assert out[2].dtype == fxkit.float32 and out[5] is out[2]
    assert expression_key(gm.graph.find_nodes(op="call")[0]) != expression_key(gm.graph.find_nodes(op="call")[1])


def test_duplicate_get_attrs_merge():
    g = Graph()
    x = g.placeholder("x")
    w1, w2 = g.get_attr("w"), g.get_attr("w")
    g.output(g.call(ops.add, (g.call(ops.mul, (x, w1)), g.call(ops.mul, (x, w2)))))
    gm = eliminate_common_subexpressions(GraphModule({"w": fxkit.tensor([2.0, 3.0])}, g))
    assert len(gm.graph.find_nodes(op="get_attr")) == 1 and calls(gm) == ["mul", "add"]
    np.testing.assert_array_equal(gm(fxkit.tensor([1.0, -1.0])).numpy(), [4.0, -6.0])


def test_impure_ops_never_merge():
    def f(x):
        return (ops.rand_like(x), ops.rand_like(x), F.dropout(x, 0.5, training=True),
                F.dropout(x, 0.5, training=True), x.exp(), x.exp())

    gm = cse(f)
    # Random ops do not write their inputs: the pure exp after them still merges.
    assert calls(gm) == ["rand_like", "rand_like", "dropout", "dropout", "exp"]
    a, b, c, d, e, f = gm(fxkit.ones(1000))
    assert not np.array_equal(a.numpy(), b.numpy()) and not np.array_equal(c.numpy(), d.numpy())
    assert e is f


def test_attention_with_dropout_never_merges_and_without_it_does(rng):
    def f(q, k, v):
        sdpa = F.scaled_dot_product_attention
        return (sdpa(q, k, v, dropout_p=0.5), sdpa(q, k, v, dropout_p=0.5), sdpa(q, k, v), sdpa(q, k, v))

    gm = cse(f)
    assert calls(gm) == ["scaled_dot_product_attention"] * 3
    q, k, v = randn(rng, 2, 8, 4), randn(rng, 2, 8, 4), randn(rng, 2, 8, 4)
    a, b, c, d = gm(q, k, v)
    assert not np.array_equal(a.numpy(), b.numpy()) and c is d


def test_training_batch_norm_calls_never_merge(rng):
    def f(x, mean, var):
        return (F.batch_norm(x, mean, var, training=True), F.batch_norm(x, mean, var, training=True))

    gm = cse(f)
    assert calls(gm) == ["batch_norm", "batch_norm"]
    mean, var = fxkit.zeros(3), fxkit.ones(3)
    x = randn(rng, 4, 3) + 2
    gm(x, mean, var)
    # Both calls ran: the running mean moved towards the batch mean twice.
    batch = x.numpy().astype(np.float64).mean(0)
    np.testing.assert_allclose(mean.numpy(), (1 - 0.9 ** 2) * batch, rtol=1e-5)


def test_nothing_computed_before_an_impure_op_is_reused_after_it(rng):
    def f(x):
        a = x + 1
        x[0] = 5.0
        b = x + 1
        return a, b

    gm = cse(f)
    assert calls(gm) == ["add", "setitem", "add"]
    x = randn(rng, 3)
    a, b = gm(x)
    assert b.numpy()[0] == 6.0 and a.numpy()[0] != 6.0


def test_values_written_in_place_never_merge(rng):
    def f(x):
        a = x + 1
        b = x + 1
        a.view(-1)[0] = 7.0          # writes a through a view of it
        return a, b

    gm = fxkit.symbolic_trace(f)
    assert gm.graph.find_nodes(op="call", target=ops.add)[0] in written_nodes(gm)
    gm = eliminate_common_subexpressions(gm)
    assert calls(gm).count("add") == 2
    x = randn(rng, 3)
    a, b = gm(x)
    assert a.numpy()[0] == 7.0
    np.testing.assert_array_equal(b.numpy(), x.numpy() + 1)


def test_training_mode_layers_merge_only_when_pure(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.drop(x) + self.drop(x), self.lin(x) + self.lin(x)

    model = M()
    gm = eliminate_common_subexpressions(fxkit.symbolic_trace(model))
    assert calls(gm) == ["drop", "drop", "add", "lin", "add"]
    gm = eliminate_common_subexpressions(fxkit.symbolic_trace(model.eval()))
    assert calls(gm) == ["drop", "add", "lin", "add"]
    x = randn(rng, 2, 3)
    assert_same(gm(x), model(x))


def test_a_pass_object_has_a_name():
    assert EliminateCommonSubexpressions().name == "eliminate_common_subexpressions"


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_outputs_stay_equal(name):
    model, inputs = zoo_model(name)
    check_model_paths(model, inputs, passes=[eliminate_common_subexpressions])


def _no_duplicates_left(gm):
    keys = [expression_key(n) for n in gm.graph.nodes
            if n.op in ("call", "get_attr") and is_pure(gm, n) and n not in written_nodes(gm)]
    keys = [k for k in keys if k is not None]
    return len(keys) == len(set(keys))


@RANDOM
@given(dags())
def test_random_graphs_keep_their_outputs(program):
    for gm in (program.graph_module(), fxkit.symbolic_trace(program.module())):
        gm = eliminate_common_subexpressions(gm)
        gm.graph.lint()
        assert_same(gm(*program.inputs), program.expected)
        assert _no_duplicates_left(gm)
