"""Port of pytorch/pytorch test/test_fx.py (class TestFX): Interpreter, Transformer and graph-editing
cases (test_interpreter* .. test_insertion_point).

Translated: ``call_function``/``call_method``/``call_module`` overrides -> fxkit's one ``call``
override; ``torchvision.models.resnet18`` -> the zoo's ``fxkit.models.resnet18``; free attributes on
nodes (``n.cached_value``) -> ``n.meta`` (fxkit nodes take no free attributes; README design notes).
"""
import contextlib
import copy
import functools
import operator
import sys

import numpy as np
import pytest

import fxkit
from fxkit import GraphModule, Interpreter, Transformer, nn, ops, symbolic_trace
from fxkit.graph import Graph
from tests.peer.helpers import MyModule, assert_close, assert_equal, randn


# test/test_fx.py::TestFX::test_interpreter
def test_interpreter():
    m = MyModule()
    gm = symbolic_trace(m)
    interpreter = Interpreter(gm)
    x = randn(3, 4)
    assert_equal(interpreter.run(x), gm(x))
    assert_equal(interpreter.run(x), m(x))


# test/test_fx.py::TestFX::test_interpreter_run_node_override
def test_interpreter_run_node_override():
    gm = symbolic_trace(MyModule())

    class RunNodeInterpreter(Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            n.meta["cached_value"] = result  # fxkit: in meta, not a free attribute of the node
            return result

    RunNodeInterpreter(gm).run(randn(3, 4))
    assert all("cached_value" in node.meta for node in gm.graph.nodes)


# test/test_fx.py::TestFX::test_interpreter_onthefly_swap
def test_interpreter_onthefly_swap():
    gm = symbolic_trace(lambda x: fxkit.sigmoid(x).neg())

    class NegSigmSwapInterpreter(Interpreter):
        def call(self, target, args, kwargs):  # torch.fx's call_function and call_method in one
            if target is ops.sigmoid:
                return fxkit.neg(*args, **kwargs)
            if target is ops.neg:
                call_self, *args_tail = args
                return call_self.sigmoid(*args_tail, **kwargs)
            return super().call(target, args, kwargs)

    x = randn(3, 4)
    assert_equal(NegSigmSwapInterpreter(gm).run(x), fxkit.neg(x).sigmoid())


# test/test_fx.py::TestFX::test_interpreter_partial_eval
def test_interpreter_partial_eval():
    gm = symbolic_trace(MyModule())
    interp = Interpreter(gm)
    env = {}
    for node in gm.graph.nodes:
        if node.op == "call" and node.target == "linear":
            env[node] = fxkit.arange(0, 12, 1).reshape(3, 4) - 6.0
            break
    assert len(env) == 1
    result = interp.run(randn(3, 4), initial_env=env)
    assert_equal(result, (fxkit.arange(0, 12, 1).reshape(3, 4) - 6.0).clamp(0.0, 1.0))


# test/test_fx.py::TestFX::test_interpreter_star_args
def test_interpreter_star_args():
    def with_star_args(x, *args):
        return x + args[0]

    gm = symbolic_trace(with_star_args)
    interp = Interpreter(gm)
    result = interp.run(fxkit.ones(3, 4), fxkit.ones(3, 4), fxkit.rand(3, 4))
    assert_equal(result, fxkit.full((3, 4), 2.0))


@pytest.mark.slow
# test/test_fx.py::TestFX::test_interpreter_noop_resnet18
def test_interpreter_noop_resnet18():
    from fxkit.models import resnet18

    rn18 = resnet18().eval()
    transformed = Transformer(symbolic_trace(rn18)).transform()
    inp = randn(2, 3, 64, 64)
    assert_close(transformed(inp), rn18(inp), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
# test/test_fx.py::TestFX::test_interpreter_gc_values
def test_interpreter_gc_values():
    from fxkit.models import resnet18

    interp = Interpreter(symbolic_trace(resnet18().eval()))
    interp.run(randn(2, 3, 64, 64))
    assert {n.name for n in interp.env} == {"output"}


# test/test_fx.py::TestFX::test_transformer_noop
def test_transformer_noop():
    gm = symbolic_trace(MyModule())
    new_gm = Transformer(gm).transform()
    x = randn(3, 4)
    assert_equal(new_gm(x), gm(x))


# test/test_fx.py::TestFX::test_transformer_op_swap
def test_transformer_op_swap():
    gm = symbolic_trace(lambda x: fxkit.sigmoid(x).neg())

    class NegSigmSwapXformer(Transformer):
        def call(self, target, args, kwargs):
            if target is ops.sigmoid:
                return fxkit.neg(*args, **kwargs)
            if target is ops.neg:
                call_self, *args_tail = args
                return call_self.sigmoid(*args_tail, **kwargs)
            return super().call(target, args, kwargs)

    transformed = NegSigmSwapXformer(gm).transform()
    x = randn(3, 4)
    assert_equal(transformed(x), fxkit.neg(x).sigmoid())


# test/test_fx.py::TestFX::test_transformer_multi_outputs
def test_transformer_multi_outputs():
    class Multi(nn.Module):
        def __init__(self):
            super().__init__()
            self.param = nn.Parameter(fxkit.rand(3, 4))
            self.linear = nn.Linear(4, 5)

        def forward(self, x):
            x = x + self.param
            out = self.linear(x)
            return x, out

    gm = symbolic_trace(Multi())
    new_gm = Transformer(gm).transform()
    x = randn(3, 4)
    assert_equal(new_gm(x), gm(x))


# test/test_fx.py::TestFX::test_wrapped_method
def test_wrapped_method():
    def wrap_with_relu(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fxkit.relu(fn(*args, **kwargs))
        return wrapper

    class Foo(nn.Module):
        @wrap_with_relu
        def forward(self, x, w):
            return fxkit.matmul(x, w)

    traced = symbolic_trace(Foo())
    assert any(n.target is ops.relu for n in traced.graph.nodes)


# test/test_fx.py::TestFX::test_empty_graph_codegen
def test_empty_graph_codegen():
    graph = Graph()
    # fxkit's lint wants one output; an empty graph still generates a forward returning None.
    gm = GraphModule(nn.Module(), graph)
    assert gm() is None


# test/test_fx.py::TestFX::test_sequential
def test_sequential():
    m = nn.Sequential(nn.Conv2d(1, 1, 1))
    gm = symbolic_trace(m)
    gm_copy = copy.deepcopy(gm)
    x = randn(1, 1, 3, 3)
    assert_equal(gm_copy(x), gm(x))


# test/test_fx.py::TestFX::test_ctx_mgr
def test_ctx_mgr():
    @contextlib.contextmanager
    def do_nothing():
        yield

    class M(nn.Module):
        @do_nothing()
        def forward(self, x):
            return fxkit.relu(x)

    m = M()
    x = fxkit.rand(3, 4)
    gm = symbolic_trace(m)
    gm.graph.lint()
    assert_equal(gm(x), m(x))


# test/test_fx.py::TestFX::test_ellipsis
def test_ellipsis():
    class M(nn.Module):
        def forward(self, x, y):
            return x + y[:, 1:10, ...]

    traced = symbolic_trace(M())
    x, y = fxkit.rand(5, 9, 3, 4), fxkit.rand(5, 15, 3, 4)
    assert_equal(traced(x, y), x + y[:, 1:10, ...])


# test/test_fx.py::TestFX::test_inf_nan
def test_inf_nan():
    class FooMod(nn.Module):
        def forward(self, x):
            return x + float("inf"), x + float("-inf"), x + float("nan")

    fm = FooMod()
    x = fxkit.rand(3, 4)
    gm = symbolic_trace(fm)
    gm.graph.lint()
    assert_equal(gm(x), fm(x))


# test/test_fx.py::TestFX::test_inf_nan_kwds
def test_inf_nan_kwds():
    graph = Graph()
    x = graph.create_node("placeholder", "x")
    b = graph.create_node("call", operator.add, (x, float("inf")), {}, name="inf")
    c = graph.create_node("call", operator.add, (x, float("nan")), {}, name="nan")
    graph.output((b, c))
    gm = GraphModule(nn.Module(), graph)
    x = fxkit.rand(3, 4)
    assert_equal(gm(x), (x + float("inf"), x + float("nan")))


# test/test_fx.py::TestFX::test_deepcopy_recursion_depth
def test_deepcopy_recursion_depth():
    depth = sys.getrecursionlimit() + 20
    g = Graph()
    x = g.placeholder("x")
    for _ in range(depth):
        x = g.call(ops.relu, (x,))
    g.output(x)
    copied_graph = copy.deepcopy(g)
    val_map = dict(zip(g.nodes, copied_graph.nodes))
    for orig_node, new_node in zip(g.nodes, copied_graph.nodes):
        assert {val_map[u] for u in orig_node.users} == set(new_node.users)


@pytest.mark.slow
# test/test_fx.py::TestFX::test_replace_uses
def test_replace_uses():
    from fxkit.models import resnet18

    rn18 = resnet18()

    class LowerReluTracer(fxkit.Tracer):
        def is_leaf_module(self, m, qualname):
            if isinstance(m, nn.ReLU):
                return False
            return super().is_leaf_module(m, qualname)

    rn18_traced = GraphModule(rn18, LowerReluTracer().trace(rn18))
    to_erase = []
    for node in rn18_traced.graph.nodes:
        if node.op == "call" and node.target is ops.relu:
            kwargs = dict(node.kwargs)
            kwargs.pop("inplace", None)  # neg has no in-place
            with rn18_traced.graph.inserting_before(node):
                new_node = rn18_traced.graph.call(ops.neg, node.args, kwargs)
            node.replace_all_uses_with(new_node)
            to_erase.append(node)
    assert to_erase
    for node in to_erase:
        rn18_traced.graph.erase_node(node)
    rn18_traced.graph.lint()


# test/test_fx.py::TestFX::test_replace_input
def test_replace_input():
    graph = Graph()
    x = graph.create_node("placeholder", "x")
    y = graph.create_node("placeholder", "y")
    b = graph.create_node("call", target=ops.relu, args=(x,))
    graph.output(b)
    b.replace_input_with(x, y)
    gm = GraphModule(nn.Module(), graph)
    input_x, input_y = randn(33, 44), randn(11, 22, seed=1)
    assert_equal(gm(input_x, input_y), fxkit.relu(input_y))


# test/test_fx.py::TestFX::test_insertion_point
def test_insertion_point():
    graph = Graph()
    x = graph.create_node("placeholder", "x")
    b = graph.create_node("call", target=ops.relu, args=(x,))
    graph.output(b)
    with graph.inserting_before(b):
        neg = graph.call(ops.neg, args=(x,))
        _, *relu_args = b.args
        b.args = (neg, *relu_args)
    gm = GraphModule(nn.Module(), graph)
    x = randn(33, 44)
    assert_equal(gm(x), fxkit.relu(fxkit.neg(x)))
    assert np.isfinite(gm(x).numpy()).all()


# test/test_fx.py::TestFX::test_shape_prop_aggregate
def test_shape_prop_aggregate():
    from fxkit.transforms import ShapeProp

    class ReturnTwo(nn.Module):
        def forward(self, x):
            return (3, fxkit.sum(x))

    class UnderTest(nn.Module):
        def __init__(self):
            super().__init__()
            self.rt = ReturnTwo()

        def forward(self, x):
            return self.rt(x)

    class RTTracer(fxkit.Tracer):
        def is_leaf_module(self, m, module_qualified_name):
            return type(m) is ReturnTwo

    ut = UnderTest()
    mod = GraphModule(ut, RTTracer().trace(ut))
    ShapeProp(mod).propagate(fxkit.rand(3, 4))
    for node in mod.graph.nodes:
        if node.op == "call" and type(node.target) is str:  # call_module
            assert "tensor_meta" in node.meta
            tensor_meta = node.meta["tensor_meta"]
            assert tensor_meta[0] == 3
            assert tensor_meta[1].shape == ()
