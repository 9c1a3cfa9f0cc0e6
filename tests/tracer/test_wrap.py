"""fxkit.wrap keeps a free function as one call node, in decorator and call form."""
import re

import numpy as np
import pytest

import fxkit
from fxkit import nn
from tests.tracer.paths import assert_same, check_all_paths


def scale_to_unit_max(x):
    """Needs concrete values (a Python float of the data): untraceable unless wrapped."""
    return x / max(float(x.abs().max()), 1e-6)


fxkit.wrap("scale_to_unit_max")


@fxkit.wrap
def clip_rows(x, limit=1.0):
    rows = [row.clamp(min=-limit, max=limit) for row in x]
    return fxkit.stack(rows)


log = []


@fxkit.wrap(pure=False)
def record(x):
    log.append(float(x.sum()))
    return x


class UsesWrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = scale_to_unit_max(self.fc(x))
        return clip_rows(y * 3, limit=0.5) + 1


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def test_wrapped_functions_are_single_call_nodes(rng):
    model = UsesWrapped()
    gm = fxkit.symbolic_trace(model)
    calls = [n.target for n in gm.graph.find_nodes(op="call")]
    assert calls == ["fc", scale_to_unit_max, fxkit.ops.mul, clip_rows, fxkit.ops.add]
    (clip,) = gm.graph.find_nodes(op="call", target=clip_rows)
    assert clip.kwargs == {"limit": 0.5}
    x = randn(rng, 3, 4)
    check_all_paths(model, (x,), gm=gm)
    assert re.search(r"= scale_to_unit_max\w*\(fc\)", gm.code)


def test_call_form_restores_the_global_after_tracing():
    before = globals()["scale_to_unit_max"]
    fxkit.symbolic_trace(UsesWrapped())
    assert globals()["scale_to_unit_max"] is before


def test_wrapped_function_runs_eagerly_outside_tracing(rng):
    x = randn(rng, 3, 2)
    expected = np.clip(x.numpy(), -1.0, 1.0)
    np.testing.assert_array_equal(clip_rows(x).numpy(), expected)


def test_impure_wrapped_function_survives_dead_code_elimination(rng):
    def f(x):
        record(x)
        return x + 1

    gm = fxkit.symbolic_trace(f)
    gm.graph.eliminate_dead_code()
    assert gm.graph.find_nodes(op="call", target=record)
    log.clear()
    x = randn(rng, 3)
    gm.recompile()
    assert_same(gm(x), x + 1)
    assert log == [pytest.approx(float(x.numpy().astype(np.float64).sum()), rel=1e-5)]


def test_pure_unused_wrapped_call_is_removed():
    def f(x):
        clip_rows(x)
        return x + 1

    gm = fxkit.symbolic_trace(f)
    assert gm.graph.eliminate_dead_code()
    assert not gm.graph.find_nodes(op="call", target=clip_rows)


def test_wrap_by_name_outside_module_level_is_refused():
    with pytest.raises(fxkit.TraceError, match="must be called at a module's top level"):
        fxkit.wrap("clip_rows")


def test_wrap_rejects_non_functions():
    with pytest.raises(TypeError, match="expected a function or its name, got int"):
        fxkit.wrap(3)
