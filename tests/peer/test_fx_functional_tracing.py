"""Port of pytorch/pytorch test/test_fx.py::TestFunctionalTracing: ``symbolic_trace`` of every
public function of ``nn.functional``.

torch.fx expects about a hundred of torch's functionals to fail (control flow on arguments, ``len``
of a proxy, built-in functions); fxkit's functionals are registry ops (DESIGN: one ``Op`` per
operation), so each traces into one ``call`` of itself, with a placeholder per parameter and the
parameter's default. The traced module is also run and compared with the eager call (not in the
original, which only traces).
"""
import inspect

import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit.runtime.op import Op
from tests.peer.helpers import assert_equal, randn

FUNCTIONALS = sorted(F.__all__)

# Functionals whose first argument alone (a float tensor of shape (2, 3, 4, 4)) is a valid call.
ONE_TENSOR = {"relu", "relu6", "hardsigmoid", "hardswish", "mish", "leaky_relu", "gelu", "silu", "sigmoid",
              "tanh", "softmax", "log_softmax", "adaptive_avg_pool2d", "adaptive_max_pool2d", "instance_norm"}


def test_the_list_of_functionals_is_what_the_module_offers():
    public = {name for name, value in vars(F).items()
              if not name.startswith("_") and name.islower() and isinstance(value, Op)}
    assert public == set(FUNCTIONALS)


# test/test_fx.py::TestFunctionalTracing::test_nn_functional_<name>
@pytest.mark.parametrize("name", FUNCTIONALS)
def test_nn_functional(name):
    fn = getattr(F, name)
    gm = fxkit.symbolic_trace(fn)
    gm.graph.lint()
    calls = list(gm.graph.find_nodes(op="call"))
    assert len(calls) == 1 and calls[0].target is fn
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    assert [p.target for p in placeholders] == list(inspect.signature(fn).parameters)
    if name in ONE_TENSOR:
        x = randn(2, 3, 4, 4)
        if name in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
            assert_equal(gm(x, 2), fn(x, 2))
        else:
            assert_equal(gm(x), fn(x))


def test_traced_functional_keeps_defaults_and_keywords():
    gm = fxkit.symbolic_trace(F.leaky_relu)
    x = fxkit.tensor(np.array([-2.0, 3.0], dtype=np.float32))
    assert_equal(gm(x), fxkit.tensor(np.array([-0.02, 3.0], dtype=np.float32)))
    assert_equal(gm(x, 0.5), fxkit.tensor(np.array([-1.0, 3.0], dtype=np.float32)))
