"""eliminate_dead_code: unused pure nodes go, impure ones and training-mode layers stay,
attributes nothing reads are deleted; outputs stay equal on the zoo and on random graphs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.transforms import EliminateDeadCode, PassManager, eliminate_dead_code
from fxkit.transforms.effects import is_pure
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params
from tests.transforms.random_graphs import dags

RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


class Wasteful(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.w = nn.Parameter(fxkit.randn(4))
        self.scale = nn.Parameter(fxkit.randn(4))

    def forward(self, x):
        dead = self.unused(x).relu() * self.w    # a whole dead chain, through a layer and a parameter
        dead.sum()
        return self.used(x) * self.scale


def test_dead_chain_goes_in_one_sweep_and_its_attributes_with_it(rng):
    model = Wasteful()
    gm = fxkit.symbolic_trace(model)
    assert "unused" in dict(gm.named_children()) and "w" in dict(gm.named_parameters())
    x = randn(rng, 2, 4)
    expected = model(x)
    gm = eliminate_dead_code(gm)
    assert str(gm.graph) == (
        "graph(x):\n"
        "    %x     = placeholder[x]\n"
        "    %used  = call[self.used](%x)\n"
        "    %scale = get_attr[scale]\n"
        "    %mul_1 = call[mul](%used, %scale)\n"
        "    return %mul_1")
    assert sorted(gm.state_dict()) == ["scale", "used.bias", "used.weight"]
    assert_same(gm(x), expected)


def test_attributes_can_be_kept():
    gm = EliminateDeadCode(remove_attributes=False)(fxkit.symbolic_trace(Wasteful()))
    assert "unused.weight" in gm.state_dict() and "w" in gm.state_dict()
    assert not gm.graph.find_nodes(op="call", target="unused")


def test_impure_calls_stay_even_unused(rng):
    def f(x):
        ops.rand_like(x)
        F.dropout(x, 0.5, training=True)
        x[0] = 1.0
        ops.neg(x)
        return x * 2

    gm = eliminate_dead_code(fxkit.symbolic_trace(f))
    names = [n.target.name for n in gm.graph.nodes if n.op == "call"]
    assert names == ["rand_like", "dropout", "setitem", "mul"]


def test_training_mode_layers_stay_eval_mode_layers_go():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)
            self.act = nn.ReLU()

        def forward(self, x):
            self.bn(x)
            self.act(x)
            return x + 1

    model = M()
    gm = eliminate_dead_code(fxkit.symbolic_trace(model))
    assert [n.target for n in gm.graph.nodes if n.op == "call" and type(n.target) is str] == ["bn"]
    gm = eliminate_dead_code(fxkit.symbolic_trace(model.eval()))
    assert [n.target for n in gm.graph.nodes if n.op == "call" and type(n.target) is str] == []
    assert "bn" not in dict(gm.named_children())


def test_running_the_kept_training_batch_norm_updates_its_statistics(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x):
            self.bn(x)
            return x * 2

    gm = eliminate_dead_code(fxkit.symbolic_trace(M()))
    x = randn(rng, 4, 3, 2, 2) + 5
    gm(x)
    expected = 0.1 * x.numpy().astype(np.float64).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(gm.bn.running_mean.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_outputs_stay_equal(name):
    model, inputs = zoo_model(name)
    _, transformed = check_model_paths(model, inputs, passes=[eliminate_dead_code])
    gm = transformed["eliminate_dead_code"]
    assert all(n.users or not is_pure(gm, n) for n in gm.graph.nodes)


def test_in_a_pass_manager(rng):
    model, inputs = zoo_model("mlp")
    gm = PassManager([EliminateDeadCode()], example_inputs=inputs)(fxkit.symbolic_trace(model))
    assert_same(gm(*inputs), model(*inputs))


@RANDOM
@given(dags())
def test_random_graphs_keep_their_outputs(program):
    for gm in (program.graph_module(), fxkit.symbolic_trace(program.module())):
        before = len(gm.graph.nodes)
        gm = eliminate_dead_code(gm)
        gm.graph.lint()
        assert_same(gm(*program.inputs), program.expected)
        assert len(gm.graph.nodes) <= before
        assert all(n.users or not is_pure(gm, n) for n in gm.graph.nodes)
