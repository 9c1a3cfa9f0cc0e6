"""Eager mode at the extremes of each float dtype agrees with PyTorch, for every elementwise op
(the sweep and its allowed differences: `tests.runtime.edge_values`)."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from tests.runtime.edge_values import (ALLOWED, CASES, FLOAT_DTYPES, assert_matches_torch, case_inputs,
                                       fxkit_inputs, torch_result, uncovered_ops)
from fxkit.runtime.registry import get_op

torch = pytest.importorskip("torch")


def test_every_elementwise_op_is_swept():
    assert uncovered_ops() == []


def test_allowed_differences_name_real_cases_and_say_why():
    for cases, _, _, reason in ALLOWED:
        assert set(cases or ()) <= set(CASES) and len(reason) > 40


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_eager_agrees_with_torch_at_the_extremes(case, dtype):
    name, args, kwargs = case_inputs(case, dtype)
    expected = torch_result(torch, name, args, kwargs)
    with np.errstate(all="ignore"):
        got = get_op(name)(*fxkit_inputs(args), **kwargs)
    assert_matches_torch(got.numpy(), expected, case, dtype, args, f"eager {case} {dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_reported_activation_extremes(dtype):
    big = float(np.finfo(dtype).max)
    x = fxkit.tensor([-big, -1e4, big], dtype=getattr(fxkit, dtype))
    silu, sigmoid, gelu = ops.silu(x).numpy(), ops.sigmoid(x).numpy(), ops.gelu(x).numpy()
    assert silu[0] == 0 and np.signbit(silu[0]) and silu[1] == 0 and np.signbit(silu[1])  # -0, as PyTorch
    assert sigmoid[0] == 0 and sigmoid[1] == 0
    assert gelu[2] == big and ops.gelu(x, approximate="tanh").numpy()[2] == big
