"""fxkit.where's branch-free select (fxkit/runtime/ops/bit_select.py) against numpy's where,
bit for bit: NaN payloads, signed zeros, infinities and integer extremes included."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fxkit
from fxkit.runtime.ops import loop_gate
from fxkit.runtime.ops.bit_select import _MIN_ELEMENTS, bit_select

DTYPES = [np.float16, np.float32, np.float64, np.int16, np.int32, np.int64]


def _values(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        v = rng.standard_normal(shape).astype(dtype)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0], dtype)
    else:
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        specials = np.array([info.min, info.max, 0, -1], dtype)
    flat = v.reshape(-1)
    flat[rng.integers(0, flat.size, 64)] = rng.choice(specials, 64)
    return v


def _bits(a):
    return a.view({2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize])


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(_MIN_ELEMENTS, 3 * _MIN_ELEMENTS), p=st.floats(0, 1),
       other_kind=st.sampled_from(["array", "zero", "zero-first"]), seed=st.integers(0, 2**32 - 1),
       loop=st.booleans())
def test_bit_select_matches_numpy_where_bit_for_bit(dtype, n, p, other_kind, seed, loop):
    rng = np.random.default_rng(seed)
    condition = rng.random(n) < p
    a = _values(rng, (n,), dtype)
    other = _values(rng, (n,), dtype) if other_kind == "array" else (0.0 if np.dtype(dtype).kind == "f" else 0)
    if other_kind == "zero-first":  # where(c, 0, b): ReLU's gradient, PyTorch's threshold_backward
        a, other = other, a
    with pytest.MonkeyPatch.context() as patch:  # floats run the numba select, or the bit masks
        patch.setattr(loop_gate, "LOOP_MIN", _MIN_ELEMENTS if loop else 2**62)
        got = bit_select(condition, a, other)
    expected = np.where(condition, a, other)
    assert got is not None and got.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("other", [-0.0, 1.0, 0.5], ids=["negative-zero", "one", "half"])
def test_other_scalars_than_a_plain_zero_are_left_to_numpy(other):
    a = np.ones(_MIN_ELEMENTS, np.float32)
    assert bit_select(a > 0, a, other) is None


@pytest.mark.parametrize("case", ["float-zero-with-integers", "small", "broadcast-condition", "mixed-dtypes",
                                  "bytes"])
def test_cases_outside_its_reach_are_left_to_numpy(case):
    n = _MIN_ELEMENTS
    a, b = np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32)
    condition = a % 3 == 0
    if case == "float-zero-with-integers":  # numpy promotes to float64 here
        assert bit_select(condition, a, 0.0) is None
    elif case == "small":
        assert bit_select(condition[:8], a[:8], b[:8]) is None
    elif case == "broadcast-condition":
        assert bit_select(condition[:1], a, b) is None
    elif case == "mixed-dtypes":
        assert bit_select(condition, a, b.astype(np.int64)) is None
    else:
        assert bit_select(condition, a.astype(np.uint8), 0) is None


def test_relu_gradient_is_zero_where_the_output_was_not_positive(rng):
    # The ReLU backward is where(out <= 0, 0, g): a random mask, the case the bit select is for.
    x = fxkit.from_numpy(rng.standard_normal((8, 16, 32, 32)).astype(np.float32))
    x.requires_grad_(True)
    g = rng.standard_normal(tuple(x.shape)).astype(np.float32)
    g.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -0.0, np.nan]
    fxkit.relu(x).backward(fxkit.from_numpy(g))
    expected = np.where(x.detach().numpy() > 0, g, np.float32(0))
    np.testing.assert_array_equal(_bits(x.grad.numpy()), _bits(expected))
