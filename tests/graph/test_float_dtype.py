"""A GraphModule's ``.double()`` / ``.to(dtype)`` / ``.half()`` also cast the dtype constants of its graph.

An imported graph records ``dtype=float32`` where the model wrote ``dtype=x.dtype``;
after ``.double()`` the graph must compute in float64 throughout, as the
float64 model would, while a deliberate cast to another dtype stays.
"""
import numpy as np

import fxkit
from fxkit import ops
from fxkit.graph import Graph, GraphModule
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms.split_module import split_module


def _bias_graph():
    """``x @ w + zeros(dtype=float32) + x.to(float16).to(float32) * 0``: a captured-at-float32 graph."""
    graph = Graph()
    x = graph.placeholder("x")
    x.meta["tensor_meta"] = TensorMeta((2, 3), fxkit.float32)
    w = graph.get_attr("w")
    bias = graph.call(ops.zeros, ([2, 3],), {"dtype": fxkit.float32})
    half = graph.call(ops.to, (x,), {"dtype": fxkit.float16})
    back = graph.call(ops.to, (half,), {"dtype": fxkit.float32})
    out = graph.call(ops.add, (graph.call(ops.mul, (x, w)), bias))
    graph.output((out, back))
    return graph


def _module():
    return GraphModule({"w": fxkit.nn.Parameter(fxkit.from_numpy(np.full((2, 3), 0.5, np.float32)))}, _bias_graph())


def test_double_casts_the_graph_dtype_constants():
    gm = _module().double()
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((2, 3)))
    out, back = gm(x)
    assert out.dtype == fxkit.float64 and back.dtype == fxkit.float64
    np.testing.assert_allclose(out.numpy(), x.numpy() * 0.5, rtol=1e-15)
    kinds = {n.kwargs.get("dtype") for n in gm.graph.nodes if n.op == "call"} - {None}
    assert kinds == {fxkit.float64, fxkit.float16}  # the deliberate float16 round trip stays
    assert gm.graph.find_nodes(op="placeholder")[0].meta["tensor_meta"].dtype == fxkit.float64


def test_to_dtype_and_back_round_trips():
    gm = _module().to(fxkit.float64).to(dtype=fxkit.float32)
    assert {n.kwargs.get("dtype") for n in gm.graph.nodes if n.op == "call"} - {None} == {fxkit.float32,
                                                                                       fxkit.float16}
    assert gm.w.dtype == fxkit.float32


def test_nested_stages_of_a_split_are_cast_too():
    gm = _module()
    parent = split_module(gm, lambda node: 0 if node.name in ("zeros", "to") else 1)
    parent.double()
    dtypes = {n.kwargs.get("dtype") for child in parent.children() for n in child.graph.nodes if n.op == "call"}
    assert fxkit.float32 not in dtypes and fxkit.float64 in dtypes
