"""Port of pytorch/pytorch test/test_fx.py (class TestFX): the cases on what a user sees when
reading or debugging a graph: printed targets, the tracer class a graph records, and the note an
exception raised in generated code carries (torch.fx prints "Call using an FX-traced Module ..." to
stderr; fxkit adds it to the exception as a PEP 678 note, see fxkit/graph/call_errors.py).
"""
import copy
import operator
import re
import traceback

import pytest

import fxkit
from fxkit import Tracer, nn, symbolic_trace
from fxkit.graph import Graph
from tests.peer.helpers import randn

_NOTE = r"Call using an fxkit GraphModule, line .* of its generated forward"


# test/test_fx.py::TestFX::test_deepcopy_graph_with_tracer_cls
def test_deepcopy_graph_with_tracer_cls():
    class TestTracer(Tracer):
        def is_leaf_module(self, module, name):
            return True

    g = Graph(tracer_cls=TestTracer)
    x = g.placeholder("x")
    g.output(x)
    h = copy.deepcopy(g)
    assert h._tracer_cls is not None
    assert g._tracer_cls == h._tracer_cls
    # Not in the original: a traced graph records its tracer's class, and copies keep it.
    traced = TestTracer().trace(nn.Linear(2, 2))
    assert traced._tracer_cls is TestTracer and traced.copy()._tracer_cls is TestTracer


# test/test_fx.py::TestFX::test_custom_traceback_raised_when_exception_source_is_graphmodule
def test_custom_traceback_raised_when_exception_source_is_graphmodule():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Parameter(randn(5))

        def forward(self, x):
            return fxkit.matmul(self.W, x)  # torch.dot

    traced = symbolic_trace(M())
    out = traced.graph.output_node()
    with traced.graph.inserting_before(out):
        relu_out = traced.graph.call(fxkit.ops.relu, (out.args[0],))
    out.args = (relu_out,)
    traced.recompile()
    # torch raises TypeError for traced(5) (torch.dot of a Python int); fxkit's matmul accepts
    # Python numbers as 0-d inputs, so a vector of the wrong length makes it fail instead.
    with pytest.raises(fxkit.ShapeError) as info:
        traced(randn(4))
    captured = "".join(traceback.format_exception(info.value))
    assert info.match("cannot be multiplied")
    assert re.search(_NOTE, captured)
    assert "node: %matmul = call[matmul]" in captured
    assert "return fxkit.matmul(self.W, x)" in captured  # the user's line the node was traced from


# test/test_fx.py::TestFX::test_custom_traceback_not_raised_when_exception_source_is_submodule
def test_custom_traceback_not_raised_when_exception_source_is_submodule():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 4)

        def forward(self, x):
            return self.linear(x)

    traced = symbolic_trace(M())
    captured = None
    try:
        traced(randn(5, 5))
    except fxkit.ShapeError:  # torch: RuntimeError
        captured = traceback.format_exc()
    assert captured is not None
    assert not re.search(_NOTE, captured)


# test/test_fx.py::TestFX::test_pretty_print_targets
# fxkit records operators and tensor functions as registry ops, printed by their names (``call[add]``
# for both ``+`` and ``fxkit.add``: DESIGN, one spelling per operation); Python's own functions print
# qualified as torch.fx prints them (``builtins.getattr``, ``operator.add``).
def test_pretty_print_targets():
    class SomeMod(nn.Module):
        def forward(self, x):
            return fxkit.add(x.foo + x.bar, 3.0)

    graph_str = str(symbolic_trace(SomeMod()).graph)
    assert "builtins.getattr" in graph_str
    assert "call[add]" in graph_str
    g = Graph()
    x = g.placeholder("x")
    foo = g.call(getattr, (x, "foo"))
    g.output(g.call(operator.add, (foo, 3.0)))
    graph_str = str(g)
    assert "builtins.getattr" in graph_str
    assert "operator.add" in graph_str
