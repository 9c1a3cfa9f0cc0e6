"""Tracer features torch.fx code relies on: wrapping builtins, math on sizes, autowrap,
graph editing with Proxy(node)."""
import math
from math import floor

import numpy as np
import pytest

import fxkit
from fxkit import GraphError, TraceError, nn, ops
from fxkit.graph import map_arg
from fxkit.tracer import Proxy, Tracer
from tests.tracer import wrapped_builtins


def _x(*shape):
    return fxkit.tensor(np.arange(math.prod(shape), dtype=np.float32).reshape(shape))


def test_wrap_len_records_one_node_and_runs():
    gm = fxkit.symbolic_trace(wrapped_builtins.scaled_by_length)
    calls = gm.graph.find_nodes(op="call", target=len)
    assert len(calls) == 1 and calls[0].args == (gm.graph.find_nodes(op="placeholder")[0],)
    x = _x(3, 2)
    np.testing.assert_array_equal(gm(x).numpy(), x.numpy() * 3)
    np.testing.assert_array_equal(gm(_x(5, 2)).numpy(), _x(5, 2).numpy() * 5)  # not specialised on 3
    assert "len" not in vars(wrapped_builtins)  # the builtin is shadowed only while tracing
    assert wrapped_builtins.length_of_list([1, 2]) == 2


def test_wrap_getattr_records_one_node():
    gm = fxkit.symbolic_trace(wrapped_builtins.transposed_by_name)
    (node,) = gm.graph.find_nodes(op="call", target=getattr)
    assert node.args[1] == "T"
    np.testing.assert_array_equal(gm(_x(2, 3)).numpy(), _x(2, 3).numpy().T)


def test_wrapped_builtin_survives_save_and_load(tmp_path):
    gm = fxkit.symbolic_trace(wrapped_builtins.scaled_by_length)
    fxkit.save(gm, str(tmp_path / "m"))
    np.testing.assert_array_equal(fxkit.load(str(tmp_path / "m"))(_x(4, 1)).numpy(), _x(4, 1).numpy() * 4)


def test_failed_wrap_does_not_poison_later_traces():
    module_methods = {name: vars(nn.Module).get(name) for name in ("__call__", "__getattr__", "__setattr__")}
    from tests.tracer import failed_wrap  # noqa: F401  (registers the failing wrap)

    def f(x):
        return x + 1

    with pytest.raises(TraceError) as info:
        fxkit.symbolic_trace(f)
    assert "no_function_of_this_name" in str(info.value) and "the wrap is dropped" in str(info.value)
    assert "len" not in vars(wrapped_builtins)  # what was patched before the failure is put back
    gm = fxkit.symbolic_trace(f)  # the next trace works
    np.testing.assert_array_equal(gm(_x(2)).numpy(), _x(2).numpy() + 1)
    assert {name: vars(nn.Module).get(name) for name in module_methods} == module_methods


def attention_scale(x):
    return x / math.sqrt(x.size(-1)) + math.floor(x.size(0) / 2) + floor(x.size(1) / 3) + math.ceil(x.size(0) / 4)


def test_math_on_traced_sizes_records_ops():
    gm = fxkit.symbolic_trace(attention_scale)
    targets = [n.target.name for n in gm.graph.find_nodes(op="call") if n.target.name.startswith("math_")]
    assert targets == ["math_sqrt", "math_floor", "math_floor", "math_ceil"]
    for shape in [(4, 9), (7, 3)]:
        x = _x(*shape)
        a = x.numpy().astype(np.float64)
        expected = a / np.sqrt(shape[1]) + np.floor(shape[0] / 2) + np.floor(shape[1] / 3) + np.ceil(shape[0] / 4)
        np.testing.assert_allclose(gm(x).numpy(), expected, rtol=1e-6)
    assert math.sqrt(4.0) == 2.0 and type(math.floor(2.5)) is int  # math is itself again


@pytest.mark.parametrize("name, args, expected", [
    ("math_sqrt", (16,), 4.0), ("math_floor", (2.5,), 2), ("math_ceil", (2.5,), 3), ("math_trunc", (-2.5,), -2),
    ("math_log", (8, 2), 3.0), ("math_pow", (2, 10), 1024.0), ("math_gcd", (12, 18), 6), ("math_isqrt", (17,), 4),
])
def test_math_ops_run_the_math_function(name, args, expected):
    out = getattr(fxkit.ops, name)(*args)
    assert out == expected and type(out) is type(expected)


def halve(x):
    return x * 0.5


def uses_halve(x):
    return halve(x) + 1


def test_autowrap_functions_and_modules():
    tracer = Tracer(autowrap_functions=(halve,))
    graph = tracer.trace(uses_halve)
    assert [n.target for n in graph.find_nodes(op="call")][0] is halve
    assert Tracer().trace(uses_halve).find_nodes(op="call", target=halve) == []  # traced through by default
    no_math = Tracer(autowrap_modules=())
    with pytest.raises(TraceError, match="float\\(\\) of traced value"):
        no_math.trace(attention_scale)


def test_proxy_of_a_node_edits_the_graph_outside_a_trace():
    # torch.fx's "graph editing with proxies": relu(x) -> gelu(x) * 2, written with operators.
    gm = fxkit.symbolic_trace(lambda x: fxkit.relu(x) + 1)
    graph = gm.graph
    (relu,) = graph.find_nodes(op="call", target=ops.relu)
    with graph.inserting_after(relu):
        (x,) = map_arg(relu.args, Proxy)
        new = (nn.functional.gelu(x) * x.shape[0]).node
    relu.replace_all_uses_with(new)
    graph.erase_node(relu)
    graph.lint()
    assert [n.target.name for n in graph.find_nodes(op="call")] == ["gelu", "size", "getitem", "mul", "add"]
    x = _x(3)
    expected = nn.functional.gelu(x).numpy().astype(np.float64) * 3 + 1
    np.testing.assert_allclose(gm(x).numpy(), expected, rtol=1e-6)


def test_proxy_misuse_names_the_problem():
    with pytest.raises(TraceError, match="Proxy\\(node\\): expected a graph Node, got int 3"):
        Proxy(3)
    g1 = fxkit.symbolic_trace(lambda x: x + 1).graph
    g2 = fxkit.symbolic_trace(lambda x: x + 1).graph
    a, b = (Proxy(g.find_nodes(op="placeholder")[0]) for g in (g1, g2))
    with pytest.raises(GraphError, match="belongs to another graph than the one being edited"):
        a + b
    with pytest.raises(GraphError, match="a tensor constant cannot be added"):
        a + fxkit.ones(1)
    add = g1.find_nodes(op="call")[0]
    add.replace_all_uses_with(add.args[0])
    g1.erase_node(add)
    with pytest.raises(GraphError, match="was erased"):
        Proxy(add)
