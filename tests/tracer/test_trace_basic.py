"""Tracing basics: the seed's MyModule, canonical op targets, attributes, leaves,
shape arithmetic, arguments and nested inputs/outputs."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn
from fxkit.tracer.specialize import check_specialized
from tests.tracer.paths import assert_same, check_all_paths


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


class MyModule(nn.Module):
    """The seed's example (torch.fx's documentation module)."""

    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(fxkit.rand(3, 4))
        self.linear = nn.Linear(4, 5)

    def forward(self, x):
        return self.linear(x + self.param).clamp(min=0.0, max=1.0)


MYMODULE_GRAPH = """\
graph(x):
    %x      = placeholder[x]
    %param  = get_attr[param]
    %add    = call[add](%x, %param)
    %linear = call[self.linear](%add)
    %clamp  = call[clamp](%linear, min=0.0, max=1.0)
    return %clamp"""


def test_mymodule_graph_prints_as_designed():
    gm = fxkit.symbolic_trace(MyModule())
    assert str(gm.graph) == MYMODULE_GRAPH


def test_mymodule_code_reads_like_python():
    code = fxkit.symbolic_trace(MyModule()).code
    assert "add = x + param" in code
    assert "linear = self.linear(add)" in code
    assert "clamp = ops.clamp(linear, min=0.0, max=1.0)" in code


def test_mymodule_matches_torch(rng, tmp_path):
    torch = pytest.importorskip("torch")
    model = MyModule()
    x = randn(rng, 3, 4)
    gm = check_all_paths(model, (x,), tmp_path)
    with torch.no_grad():
        lin = torch.nn.Linear(4, 5)
        lin.weight.copy_(torch.from_numpy(model.linear.weight.numpy()))
        lin.bias.copy_(torch.from_numpy(model.linear.bias.numpy()))
        ref = lin(torch.from_numpy(x.numpy()) + torch.from_numpy(model.param.numpy())).clamp(min=0.0, max=1.0)
    np.testing.assert_allclose(gm(x).numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("spelling", [
    lambda x: x.relu(), lambda x: F.relu(x), lambda x: fxkit.relu(x), lambda x: fxkit.ops.relu(x)],
    ids=["method", "functional", "fxkit", "ops"])
def test_methods_and_functions_canonicalise_to_the_op(spelling):
    gm = fxkit.symbolic_trace(spelling)
    (node,) = gm.graph.find_nodes(op="call")
    assert node.target is fxkit.ops.relu and node.is_op(fxkit.ops.relu)


def test_operators_record_registry_ops(rng):
    def f(x, y):
        return -(x @ y) * 2 + (x @ y) / 3 - 1 < x @ y

    gm = fxkit.symbolic_trace(f)
    names = [n.target.name for n in gm.graph.find_nodes(op="call")]
    assert names == ["matmul", "neg", "mul", "matmul", "div", "add", "sub", "matmul", "lt"]
    x, y = randn(rng, 3, 3), randn(rng, 3, 3)
    assert_same(gm(x, y), f(x, y))


class WithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(fxkit.rand(4))
        self.register_buffer("shift", fxkit.rand(4))
        self.fc = nn.Linear(4, 4)
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        y = x * self.scale + self.shift
        y = self.fc(y)
        return self.seq(y) * self.scale


def test_parameters_and_buffers_are_get_attr_and_layers_are_leaves(rng, tmp_path):
    model = WithState()
    gm = check_all_paths(model, (randn(rng, 2, 4),), tmp_path)
    attrs = [n.target for n in gm.graph.find_nodes(op="get_attr")]
    assert attrs == ["scale", "shift"]  # one node per attribute, reused
    modules = [n.target for n in gm.graph.find_nodes(op="call") if isinstance(n.target, str)]
    assert modules == ["fc", "seq.0", "seq.1"]  # Sequential traced through, layers kept
    assert gm.graph.find_nodes(op="call", target="seq.0")[0].is_module(gm, nn.Linear)


def test_parameters_of_leaf_modules_used_directly():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(3, 5, bias=False)

        def forward(self, x):
            return self.emb(x) @ self.emb.weight  # the weight, tied

    gm = fxkit.symbolic_trace(Tied())
    assert [n.target for n in gm.graph.find_nodes(op="get_attr")] == ["emb.weight"]


def test_shape_arithmetic_is_recorded(rng):
    def f(x):
        return x.view(x.shape[0] * 2, -1)

    gm = fxkit.symbolic_trace(f)
    targets = [n.target.name for n in gm.graph.find_nodes(op="call")]
    assert targets == ["size", "getitem", "mul", "view"]
    for batch in (2, 5):  # the graph follows the input's shape, not the traced one
        x = randn(rng, batch, 6)
        assert_same(gm(x), x.view(batch * 2, 3))


def test_size_dim_dtype_device_attributes(rng):
    def f(x):
        return x.view(x.size(0), -1).to(x.dtype) * x.ndim

    gm = fxkit.symbolic_trace(f)
    x = randn(rng, 3, 2, 2)
    assert_same(gm(x), f(x))
    getattrs = [n.args[1] for n in gm.graph.find_nodes(op="call", target=getattr)]
    assert getattrs == ["dtype"]


def test_keyword_default_and_keyword_only_arguments(rng):
    class M(nn.Module):
        def forward(self, x, y=None, *, scale=2.0):
            return x * scale + y

    gm = fxkit.symbolic_trace(M())
    placeholders = [n.target for n in gm.graph.find_nodes(op="placeholder")]
    assert placeholders == ["x", "y", "scale"]
    x, y = randn(rng, 3), randn(rng, 3)
    assert_same(gm(x, y, scale=0.5), x * 0.5 + y)
    assert_same(gm(x, y), x * 2.0 + y)


def test_nested_inputs_and_outputs(rng, tmp_path):
    class M(nn.Module):
        def forward(self, pair, table):
            a, b = pair
            return {"sum": (a + table["w"],), "rest": [b * 2, pair[1] - a]}

    model = M()
    inputs = ((randn(rng, 3), randn(rng, 3)), {"w": randn(rng, 3)})
    gm = check_all_paths(model, inputs, tmp_path)
    assert gm.graph.find_nodes(op="call", target=fxkit.ops.getitem)


def test_unpacking_multi_output_ops(rng):
    def f(x):
        a, b = x.chunk(2, 1)
        return a * b

    gm = fxkit.symbolic_trace(f)
    x = randn(rng, 3, 4)
    assert_same(gm(x), f(x))


def test_concrete_args_specialise(rng):
    class M(nn.Module):
        def forward(self, x, flag):
            return x.relu() if flag else x.neg()

    x = randn(rng, 4)
    on = fxkit.symbolic_trace(M(), concrete_args={"flag": True})
    off = fxkit.symbolic_trace(M(), concrete_args={"flag": False})
    assert_same(on(x), x.relu())
    assert_same(off(x), x.neg())
    assert [n.target.name for n in off.graph.find_nodes(op="call") if n.target is not check_specialized] == ["neg"]


def test_tensor_and_array_constants_become_attributes(rng):
    table = fxkit.from_numpy(rng.standard_normal(4).astype(np.float32))
    offsets = rng.standard_normal(4).astype(np.float32)

    def f(x):
        return (x + table) * 2 + offsets - offsets * x

    gm = fxkit.symbolic_trace(f)
    targets = [n.target for n in gm.graph.find_nodes(op="get_attr")]
    assert targets == ["_tensor_constant0", "_tensor_constant1"]
    x = randn(rng, 4)
    assert_same(gm(x), f(x))


def test_inplace_operators_rebind_every_name(rng):
    def f(x):
        y = x * 1.0
        alias = y
        y += 1
        y.mul_(3)
        return alias, y

    gm = fxkit.symbolic_trace(f)
    x = randn(rng, 3)
    assert_same(gm(x), f(x))


def test_numpy_array_on_the_left_of_an_operator(rng):
    offsets = rng.standard_normal(3).astype(np.float32)

    def f(x):
        return offsets * x + offsets

    gm = fxkit.symbolic_trace(f)
    x = randn(rng, 3)
    assert_same(gm(x), f(x))


def test_stack_meta_names_the_user_line():
    def f(x):
        return x.exp()

    gm = fxkit.symbolic_trace(f)
    (node,) = gm.graph.find_nodes(op="call")
    loc = node.meta["stack"]
    assert loc.filename == __file__ and loc.lineno == f.__code__.co_firstlineno + 1
    assert loc.function == "f" and loc.line == "return x.exp()"


def test_custom_leaf_modules(rng):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x).relu()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x) + 1

    class KeepBlocks(fxkit.Tracer):
        def is_leaf_module(self, module, qualname):
            return isinstance(module, Block) or super().is_leaf_module(module, qualname)

    net = Net()
    graph = KeepBlocks().trace(net)
    assert [n.target for n in graph.find_nodes(op="call")][0] == "block"
    gm = fxkit.GraphModule(net, graph)
    x = randn(rng, 2, 3)
    assert_same(gm(x), net(x))


def test_patches_are_removed_after_tracing_even_on_error():
    before = (nn.Module.__call__, nn.Module.__getattr__, nn.Module.__setattr__)

    def bad(x):
        return len(x)

    with pytest.raises(fxkit.TraceError):
        fxkit.symbolic_trace(bad)
    assert (nn.Module.__call__, nn.Module.__getattr__, nn.Module.__setattr__) == before
    from fxkit.runtime import tracing_hook
    assert tracing_hook.ACTIVE == []


def test_setitem_on_computed_values_is_kept_in_order(rng):
    def f(x):
        y = x * 1
        y[0] = 5.0
        y[1:, 0] = x[0, 0]
        return y

    gm = fxkit.symbolic_trace(f)
    assert len(gm.graph.find_nodes(op="call", target=fxkit.ops.setitem)) == 2
    gm.graph.eliminate_dead_code()  # setitem has no users but is impure: it stays
    assert len(gm.graph.find_nodes(op="call", target=fxkit.ops.setitem)) == 2
    x = randn(rng, 3, 3)
    expected = x.numpy().copy()
    expected[0] = 5.0
    expected[1:, 0] = x.numpy()[0, 0]
    np.testing.assert_array_equal(gm(x).numpy(), expected)


def test_retracing_a_graph_module_gives_the_same_graph(rng):
    model = WithState()
    gm = fxkit.symbolic_trace(model)
    again = fxkit.symbolic_trace(gm)
    assert str(again.graph) == str(gm.graph)
    x = randn(rng, 2, 4)
    assert_same(again(x), model(x))


def test_modules_created_inside_forward_are_traced_through(rng):
    def f(x):
        return nn.ReLU()(x) * 2

    gm = fxkit.symbolic_trace(f)
    assert [n.target.name for n in gm.graph.find_nodes(op="call")] == ["relu", "mul"]
    x = randn(rng, 5)
    assert_same(gm(x), f(x))
