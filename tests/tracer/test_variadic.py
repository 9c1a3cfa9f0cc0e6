"""``forward(self, x, *args, **kwargs)``: one placeholder per starred parameter, as in torch.fx."""
import numpy as np
import pytest

import fxkit
from fxkit import TraceError, nn
from fxkit.errors import LoweringError
from fxkit.graph import Interpreter


class Variadic(nn.Module):
    def forward(self, x, *args, scale=2.0, **kwargs):
        return x * scale + args[0] + kwargs["foo"]


def _value(*values):
    return fxkit.tensor(np.array(values, dtype=np.float32))


def test_starred_parameters_become_placeholders_and_the_generated_forward_takes_them_again():
    gm = fxkit.symbolic_trace(Variadic())
    text = str(gm.graph)
    assert text.startswith("graph(x, *args, scale, **kwargs):")
    assert "placeholder[*args]" in text and "placeholder[**kwargs]" in text
    assert "def forward(self, x, *args, scale=2.0, **kwargs):" in gm.code
    x, y, z = _value(1.0), _value(10.0), _value(100.0)
    np.testing.assert_array_equal(gm(x, y, foo=z).numpy(), [112.0])
    np.testing.assert_array_equal(gm(x, y, scale=3.0, foo=z).numpy(), [113.0])


def test_interpreter_retrace_and_save_keep_the_starred_inputs(tmp_path):
    gm = fxkit.symbolic_trace(Variadic())
    x, y, z = _value(1.0), _value(10.0), _value(100.0)
    np.testing.assert_array_equal(Interpreter(gm).run(x, y, scale=3.0, foo=z).numpy(), [113.0])
    np.testing.assert_array_equal(fxkit.symbolic_trace(gm)(x, y, foo=z).numpy(), [112.0])
    fxkit.save(gm, tmp_path / "variadic")
    np.testing.assert_array_equal(fxkit.load(tmp_path / "variadic")(x, y, foo=z).numpy(), [112.0])


def test_what_needs_the_count_or_the_keys_is_refused():
    def iterates(*xs):
        return sum(xs)

    with pytest.raises(TraceError, match="iterating over traced value %xs"):
        fxkit.symbolic_trace(iterates)
    with pytest.raises(TraceError, match=r"concrete_args fixes \*\*kwargs of Variadic.forward"):
        fxkit.symbolic_trace(Variadic(), concrete_args={"kwargs": {}})


def test_compile_refuses_starred_inputs():
    gm = fxkit.symbolic_trace(Variadic())
    with pytest.raises(LoweringError, match=r"fxkit.compile\(Variadic\): the graph input \*args is not compiled"):
        fxkit.compile(gm, backend="numpy", example_inputs=(_value(1.0), _value(2.0)))


def test_a_graph_whose_placeholders_no_signature_can_take_is_refused():
    from fxkit import GraphError, GraphModule
    from fxkit.graph import Graph

    graph = Graph()
    graph.placeholder("**kwargs")
    graph.placeholder("x")
    graph.output(None)
    with pytest.raises(GraphError, match=r"placeholder %x follows the \*\*kwargs placeholder; move it before"):
        GraphModule(nn.Module(), graph)
    graph = Graph()
    graph.placeholder("*a")
    graph.placeholder("*b")
    graph.output(None)
    with pytest.raises(GraphError, match=r"placeholder %b is a second \*args placeholder"):
        GraphModule(nn.Module(), graph)
