"""concrete_args guards: a specialised graph refuses another value for the argument.

Regression (issue 15): ``gm(x, scale=3.0)`` silently returned the ``scale=None`` result.
"""
import math

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.transforms import eliminate_dead_code
from fxkit.tracer.specialize import check_specialized


class Scaled(nn.Module):
    def forward(self, x, scale=None):
        if scale is None:
            return x * 2
        return x * scale


def _x():
    return fxkit.tensor(np.arange(4, dtype=np.float32))


def test_other_value_raises_specialization_error():
    gm = fxkit.symbolic_trace(Scaled(), concrete_args={"scale": None})
    x = _x()
    np.testing.assert_array_equal(gm(x).numpy(), np.arange(4) * 2)
    np.testing.assert_array_equal(gm(x, None).numpy(), np.arange(4) * 2)
    with pytest.raises(fxkit.SpecializationError) as info:
        gm(x, scale=3.0)
    message = str(info.value)
    assert "argument 'scale' was specialised to None" in message and "passed 3.0" in message
    assert "hint: call with scale=None (or leave it out), or trace again" in message
    with pytest.raises(AssertionError):  # torch.fx's guard raises AssertionError; code catching it still works
        gm(x, scale=3.0)


def affine(x, scale):
    return x * scale[0] + scale[1]


@pytest.mark.parametrize("root, concrete, good, bad", [
    (Scaled(), {"scale": 3.0}, {"scale": 3.0}, {"scale": 2.0}),
    (Scaled(), {"scale": 3.0}, {"scale": 3}, {"scale": None}),
    (Scaled(), {"scale": None}, {}, {"scale": "None"}),
    (affine, {"scale": (1.0, 2.0)}, {"scale": (1.0, 2.0)}, {"scale": (1.0, 2.5)}),
    (Scaled(), {"scale": math.nan}, {"scale": math.nan}, {"scale": 0.0}),
])
def test_guard_compares_values(root, concrete, good, bad):
    gm = fxkit.symbolic_trace(root, concrete_args=concrete)
    gm(_x(), **good)
    with pytest.raises(fxkit.SpecializationError):
        gm(_x(), **bad)


def test_guard_is_a_node_after_the_placeholders_and_survives_passes(tmp_path):
    gm = fxkit.symbolic_trace(Scaled(), concrete_args={"scale": None})
    ops = [n.op for n in gm.graph.nodes]
    assert ops[:2] == ["placeholder"] * 2 and ops[2] == "call"
    guard = gm.graph.find_nodes(op="call", target=check_specialized)
    assert len(guard) == 1 and guard[0].args[1:] == (None, "scale")
    assert "check_specialized" in gm.code and "3.0" not in gm.code
    eliminate_dead_code(gm)
    assert gm.graph.find_nodes(op="call", target=check_specialized)
    fxkit.save(gm, str(tmp_path / "m"))
    loaded = fxkit.load(str(tmp_path / "m"))
    with pytest.raises(fxkit.SpecializationError):
        loaded(_x(), scale=1.0)


def test_unguardable_values_are_not_guarded():
    marker = object()

    def f(x, cfg):
        return x + 1 if cfg is marker else x

    gm = fxkit.symbolic_trace(f, concrete_args={"cfg": marker})
    assert not gm.graph.find_nodes(op="call", target=check_specialized)
    np.testing.assert_array_equal(gm(_x()).numpy(), np.arange(4) + 1)
