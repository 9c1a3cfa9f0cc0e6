"""`ProxyableClassMeta`: constructing from traced values is one call node; from constants, a constant."""
import numpy as np

import fxkit
from fxkit.tracer import ProxyableClassMeta


class Scaled(metaclass=ProxyableClassMeta):
    def __init__(self, value, factor=2.0):
        self.value = value * factor if float(factor) != 1.0 else value


def test_construction_from_a_traced_value_is_recorded_not_run():
    def f(x):
        return Scaled(x, factor=3.0)

    gm = fxkit.symbolic_trace(f)
    (call,) = [n for n in gm.graph.nodes if n.op == "call"]
    assert call.target is Scaled and call.kwargs == {"factor": 3.0}
    x = fxkit.tensor(np.array([1.0, 2.0], dtype=np.float32))
    np.testing.assert_array_equal(gm(x).value.numpy(), [3.0, 6.0])


def test_construction_from_constants_runs_at_once():
    def f(x):
        return x + Scaled(fxkit.ones(2)).value

    gm = fxkit.symbolic_trace(f)
    assert all(n.target is not Scaled for n in gm.graph.nodes)
    np.testing.assert_array_equal(gm(fxkit.zeros(2)).numpy(), [2.0, 2.0])
