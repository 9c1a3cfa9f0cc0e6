"""Interpreter (node-by-node execution, error reports) and Transformer (rebuilding)."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, ShapeError, ops
from fxkit.errors import format_error
from fxkit.graph import Graph, GraphModule, Interpreter, SourceLocation, Transformer, Value
from tests.graph.builders import MyModule, my_module_graph, my_module_reference, randn


def _gm():
    return GraphModule(MyModule(), my_module_graph(with_stack=True))


def test_run_matches_reference(rng):
    gm = _gm()
    x = randn(rng, 3, 4)
    np.testing.assert_allclose(Interpreter(gm).run(x).numpy(), my_module_reference(gm, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(Interpreter(gm).run(x).numpy(), gm(x).numpy())


def test_values_are_freed_after_last_use(rng):
    gm = _gm()
    interp = Interpreter(gm)
    interp.run(randn(rng, 3, 4))
    assert [n.name for n in interp.env] == ["output"]
    keep = Interpreter(gm, garbage_collect_values=False)
    keep.run(randn(rng, 3, 4))
    assert len(keep.env) == len(gm.graph.nodes)


def test_overridable_methods(rng):
    class Recorder(Interpreter):
        def __init__(self, module):
            super().__init__(module)
            self.seen = []

        def call(self, target, args, kwargs):
            self.seen.append(target if isinstance(target, str) else target.name)
            return super().call(target, args, kwargs)

        def get_attr(self, target, args, kwargs):
            return super().get_attr(target, args, kwargs) * 0

    gm = _gm()
    x = randn(rng, 3, 4)
    rec = Recorder(gm)
    out = rec.run(x)
    assert rec.seen == ["add", "linear", "clamp"]
    w, b = gm.linear.weight.numpy().astype(np.float64), gm.linear.bias.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.clip(x.numpy() @ w.T + b, 0, 1), rtol=1e-5, atol=1e-6)


def test_placeholder_defaults_and_missing_inputs(rng):
    g = Graph()
    x = g.placeholder("x")
    scale = g.placeholder("scale", default=3.0)
    g.output(g.call(ops.mul, (x, scale)))
    gm = GraphModule(fxkit.nn.Module(), g)
    x_value = randn(rng, 2)
    np.testing.assert_allclose(Interpreter(gm).run(x_value).numpy(), x_value.numpy() * 3.0, rtol=1e-6)
    np.testing.assert_allclose(Interpreter(gm).run(x_value, 0.5).numpy(), x_value.numpy() * 0.5, rtol=1e-6)
    with pytest.raises(GraphError, match="missing a value for the graph input 'x'"):
        Interpreter(gm).run()


def test_initial_env_skips_nodes(rng):
    gm = _gm()
    add = gm.graph.find_nodes(target=ops.add)[0]
    fake = randn(rng, 3, 4)
    out = Interpreter(gm).run(randn(rng, 3, 4), initial_env={add: fake})
    w, b = gm.linear.weight.numpy().astype(np.float64), gm.linear.bias.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.clip(fake.numpy() @ w.T + b, 0, 1), rtol=1e-5, atol=1e-6)


def test_failure_names_node_and_source_line(rng):
    gm = _gm()
    with pytest.raises(ShapeError) as info:
        Interpreter(gm).run(randn(rng, 3, 7))
    lines = str(info.value).split("\n")
    assert lines[0].startswith("add: ")  # the op's own message comes first
    assert "  at model.py:14 in forward: return self.linear(x + self.param).clamp(min=0.0, max=1.0)" in lines
    assert "  node: %add = call[add](%x, %param)" in lines


def divide(value):
    return value // 0


def refuse(value):
    raise ShapeError(format_error("refuse: no", hint="do something else"))


def test_non_fxkit_failure_becomes_graph_error(rng):
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call(divide, (x,)))
    with pytest.raises(GraphError) as info:
        Interpreter(GraphModule(fxkit.nn.Module(), g)).run(1)
    assert str(info.value) == ("ZeroDivisionError: integer division or modulo by zero\n"
                               "  node: %divide = call[divide](%x)")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_node_lines_go_above_the_hint():
    g = Graph()
    x = g.placeholder("x")
    call = g.call(refuse, (x,))
    call.meta["stack"] = SourceLocation("m.py", 3, "forward", "y = refuse(x)")
    g.output(call)
    with pytest.raises(ShapeError) as info:
        Interpreter(GraphModule(fxkit.nn.Module(), g)).run(1)
    assert str(info.value) == ("refuse: no\n  at m.py:3 in forward: y = refuse(x)\n"
                               "  node: %refuse = call[refuse](%x)\n  hint: do something else")


def test_identity_transform_round_trips(rng):
    gm = _gm()
    new = Transformer(gm).transform()
    assert new is not gm and str(new.graph) == str(gm.graph) and new.code == gm.code
    assert [n.meta for n in new.graph.nodes] == [n.meta for n in gm.graph.nodes]
    new.graph.lint()
    x = randn(rng, 3, 4)
    np.testing.assert_array_equal(new(x).numpy(), gm(x).numpy())


class ClampToRelu(Transformer):
    def call(self, target, args, kwargs):
        if target is ops.clamp:
            return super().call(ops.relu, args[:1], {})
        return super().call(target, args, kwargs)


def test_transformer_swaps_an_op_and_keeps_meta(rng):
    gm = _gm()
    for node in gm.graph.nodes:
        node.meta["shape"] = "known"
    new = ClampToRelu(gm).transform()
    relu = new.graph.find_nodes(target=ops.relu)[0]
    assert not new.graph.find_nodes(target=ops.clamp)
    assert relu.name == "relu" and relu.meta["shape"] == "known"
    assert relu.stack == gm.graph.find_nodes(target=ops.clamp)[0].stack
    x = randn(rng, 3, 4)
    w, b = gm.linear.weight.numpy().astype(np.float64), gm.linear.bias.numpy().astype(np.float64)
    expected = np.maximum((x.numpy() + gm.param.numpy()) @ w.T + b, 0)
    np.testing.assert_allclose(new(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_ops_on_values_are_recorded(rng):
    class DoubleLinear(Transformer):
        def call(self, target, args, kwargs):
            out = super().call(target, args, kwargs)
            if target == "linear":
                assert isinstance(out, Value)
                return ops.sub(out * 2, 1.0)
            return out

    gm = _gm()
    new = DoubleLinear(gm).transform()
    mul, sub = new.graph.find_nodes(target=ops.mul)[0], new.graph.find_nodes(target=ops.sub)[0]
    linear = new.graph.find_nodes(target="linear")[0]
    assert mul.args == (linear, 2) and sub.args == (mul, 1.0)
    assert mul.stack == linear.stack and "shape" not in mul.meta
    x = randn(rng, 3, 4)
    w, b = gm.linear.weight.numpy().astype(np.float64), gm.linear.bias.numpy().astype(np.float64)
    expected = np.clip(((x.numpy() + gm.param.numpy()) @ w.T + b) * 2 - 1, 0, 1)
    np.testing.assert_allclose(new(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_one_interpreter_runs_in_several_threads_at_once(rng):
    class Meeting(Interpreter):
        """Two runs meet at their first call, so each is half-way while the other starts."""

        def __init__(self, module):
            super().__init__(module)
            self.barrier = threading.Barrier(2, timeout=10)
            self.met = threading.local()

        def call(self, target, args, kwargs):
            if not getattr(self.met, "done", False):
                self.met.done = True
                self.barrier.wait()
            return super().call(target, args, kwargs)

    gm = _gm()
    interp = Meeting(gm)
    inputs = [randn(rng, 3, 4), randn(rng, 3, 4)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(interp.run, inputs))
    for x, got in zip(inputs, results):
        np.testing.assert_allclose(got.numpy(), my_module_reference(gm, x), rtol=1e-5, atol=1e-6)


def test_a_shared_interpreter_under_load(rng):
    gm = _gm()
    interp = Interpreter(gm)
    inputs = [randn(rng, 3, 4) for _ in range(4)]
    expected = [my_module_reference(gm, x) for x in inputs]

    def work(k):
        return all(np.allclose(interp.run(inputs[k]).numpy(), expected[k], rtol=1e-5, atol=1e-6)
                   for _ in range(150))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))
