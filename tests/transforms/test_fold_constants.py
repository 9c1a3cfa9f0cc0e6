"""fold_constants: sub-graphs of get_attrs and constants become one precomputed attribute;
impure, random and written values are never folded; outputs stay equal on the zoo and on random graphs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.errors import ShapeError
from fxkit.transforms import FoldConstants, fold_constants
from fxkit.transforms.effects import is_pure, written_nodes
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params
from tests.transforms.random_graphs import dags

RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def calls(gm):
    return [n.target.name if hasattr(n.target, "name") else n.target for n in gm.graph.nodes if n.op == "call"]


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(4, 3))

    def forward(self, x):
        return ops.matmul(x, self.w.t() * 2.0)  # the constant part


def test_a_constant_sub_graph_becomes_one_attribute(rng):
    model = Scaled()
    gm = fold_constants(fxkit.symbolic_trace(model))
    gm.graph.lint()
    assert str(gm.graph) == (
        "graph(x):\n"
        "    %x                  = placeholder[x]\n"
        "    %_folded_constant_0 = get_attr[_folded_constant_0]\n"
        "    %matmul             = call[matmul](%x, %_folded_constant_0)\n"
        "    return %matmul")
    assert list(gm.state_dict()) == ["_folded_constant_0"]
    np.testing.assert_allclose(gm._folded_constant_0.numpy(), model.w.numpy().T.astype(np.float64) * 2)
    x = randn(rng, 2, 3)
    expected = x.numpy().astype(np.float64) @ (model.w.numpy().T.astype(np.float64) * 2)
    np.testing.assert_allclose(gm(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert_same(gm(x), model(x))


def test_the_attribute_node_takes_over_the_meta():
    gm = fxkit.symbolic_trace(Scaled())
    mul = gm.graph.find_nodes(op="call", target=ops.mul)[0]
    mul.meta["note"] = "kept"
    gm = fold_constants(gm)
    (attr,) = gm.graph.find_nodes(op="get_attr")
    assert attr.meta["note"] == "kept"
    assert "the constant part" in attr.stack.line


def test_attributes_can_be_kept_and_names_do_not_collide():
    model = Scaled()
    gm = FoldConstants(remove_attributes=False)(fxkit.symbolic_trace(model))
    assert sorted(gm.state_dict()) == ["_folded_constant_0", "w"]
    output = gm.graph.output_node()
    with gm.graph.inserting_before(output):
        extra = gm.graph.call(ops.neg, (gm.graph.get_attr("w"),))
    output.args = ((output.args[0], extra),)
    gm = fold_constants(gm)
    assert sorted(gm.state_dict()) == ["_folded_constant_0", "_folded_constant_1"]
    np.testing.assert_array_equal(gm(fxkit.randn(2, 3))[1].numpy(), -model.w.numpy())


def test_python_values_are_written_into_their_users(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.randn(5, 3))

        def forward(self, x):
            return x.reshape(-1, self.w.size(1)) * self.w.shape[0]

    gm = fold_constants(fxkit.symbolic_trace(M()))
    assert calls(gm) == ["reshape", "mul"]
    reshape, mul = gm.graph.find_nodes(op="call")
    assert reshape.args[1:] == (-1, 3) and mul.args[1] == 5
    assert list(gm.state_dict()) == []
    x = randn(rng, 2, 3)
    np.testing.assert_allclose(gm(x).numpy(), x.numpy() * 5)


def test_a_tuple_of_tensors_read_whole_stays_computed(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.randn(4, 3))

        def forward(self, x):
            pieces = self.w.chunk(2)
            return x + pieces[0], pieces

    model = M()
    gm = fold_constants(fxkit.symbolic_trace(model))
    assert calls(gm) == ["chunk", "add"]
    assert len(gm.graph.find_nodes(op="get_attr")) == 2   # w for the chunk, the folded piece for the add
    x = randn(rng, 2, 3)
    assert_same(gm(x), model(x))


def test_random_ops_are_never_folded():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.randn(1000))

        def forward(self, x):
            return x + ops.rand_like(self.w) + F.dropout(self.w, 0.5, training=True)

    gm = fold_constants(fxkit.symbolic_trace(M()))
    assert calls(gm) == ["rand_like", "add", "dropout", "add"]
    x = fxkit.zeros(1000)
    assert not np.array_equal(gm(x).numpy(), gm(x).numpy())


def test_attributes_an_impure_op_writes_are_not_constants(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", fxkit.zeros(3))
            self.register_buffer("var", fxkit.ones(3))

        def forward(self, x):
            shift = self.mean * 2                     # reads a buffer that batch_norm updates
            return F.batch_norm(x, self.mean, self.var, training=True) + shift

    model = M()
    gm = fxkit.symbolic_trace(model)
    assert gm.graph.find_nodes(op="get_attr", target="mean")[0] in written_nodes(gm)
    gm = fold_constants(gm)
    assert "mul" in calls(gm)
    x = randn(rng, 4, 3) + 3
    first, second = gm(x), gm(x)
    # Each call's shift reads the running mean as the call before left it.
    batch_mean = x.numpy().astype(np.float64).mean(0)
    np.testing.assert_allclose((second - first).numpy(), np.broadcast_to(2 * 0.1 * batch_mean, (4, 3)),
                               rtol=1e-4, atol=1e-6)


def test_values_written_in_place_are_not_folded(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.randn(3))

        def forward(self, x):
            c = self.w * 2
            c[0] = x.sum()          # rewritten on every call
            return c

    model = M()
    gm = fold_constants(fxkit.symbolic_trace(model))
    assert calls(gm) == ["mul", "sum", "setitem"]
    a, b = randn(rng, 2), randn(rng, 2)
    np.testing.assert_allclose(gm(a).numpy()[0], a.numpy().sum(), rtol=1e-6)
    np.testing.assert_allclose(gm(b).numpy()[0], b.numpy().sum(), rtol=1e-6)


def test_a_failing_constant_names_the_pass_and_the_node():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.randn(4, 4))

        def forward(self, x):
            return x + self.w.view(5, 5)

    with pytest.raises(ShapeError) as info:
        fold_constants(fxkit.symbolic_trace(M()))
    message = str(info.value)
    assert message.startswith("fold_constants: precomputing a constant sub-graph failed: view")
    assert "node: %view = call[view](%w, 5, 5)" in message
    assert "self.w.view(5, 5)" in message


def test_nothing_constant_leaves_the_graph_alone(rng):
    gm = fxkit.symbolic_trace(lambda x: x.relu() + 1)
    before = str(gm.graph)
    assert str(fold_constants(gm).graph) == before


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_outputs_stay_equal(name):
    model, inputs = zoo_model(name)
    check_model_paths(model, inputs, passes=[fold_constants])


def _unfolded_constants(gm):
    """Calls whose inputs are all get_attrs but which stayed (other than unfoldable tuples)."""
    written = written_nodes(gm)
    return [n for n in gm.graph.nodes if n.op == "call" and is_pure(gm, n) and n not in written
            and all(i.op == "get_attr" for i in n.all_input_nodes) and not n.is_op("chunk")]


@RANDOM
@given(dags())
def test_random_graphs_keep_their_outputs(program):
    for gm in (program.graph_module(), fxkit.symbolic_trace(program.module())):
        gm = fold_constants(gm)
        gm.graph.lint()
        assert_same(gm(*program.inputs), program.expected)
        assert _unfolded_constants(gm) == []
