"""Dtype promotion follows PyTorch: `fxkit.runtime.dtypes` against ``torch.result_type``
for every pair of dtypes, and the dtype elementwise ops actually produce.

The expectations at the end run without PyTorch; the rest uses it as the oracle.
"""
import itertools

import numpy as np
import pytest

import fxkit
from fxkit.runtime import dtypes

DTYPES = [d for d in (fxkit.bool, fxkit.uint8, fxkit.int8, fxkit.int16, fxkit.int32, fxkit.int64, fxkit.float16,
                      fxkit.bfloat16, fxkit.float32, fxkit.float64) if d is not None]
PAIRS = list(itertools.product(DTYPES, DTYPES))
SCALARS = [True, 3, -2, 2.5]
pair_ids = [f"{a.name}-{b.name}" for a, b in PAIRS]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def torch_dtype(torch, dtype):
    return getattr(torch, dtype.name)


def sample(rng, dtype, shape):
    """Small non-negative values of ``dtype`` (no overflow, valid for uint8)."""
    if dtype is fxkit.bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.is_floating_point:
        return np.asarray(rng.random(shape) * 4, dtype.np)
    return np.asarray(rng.integers(0, 4, size=shape), dtype.np)


@pytest.mark.parametrize("a,b", PAIRS, ids=pair_ids)
def test_promote_types_matches_torch(torch, a, b):
    expected = torch.promote_types(torch_dtype(torch, a), torch_dtype(torch, b))
    assert dtypes.promote_types(a, b).name == str(expected).removeprefix("torch.")


@pytest.mark.parametrize("a,b", PAIRS, ids=pair_ids)
def test_result_type_matches_torch(torch, a, b):
    ta, tb = torch_dtype(torch, a), torch_dtype(torch, b)
    vector_a, vector_b = torch.ones(2, dtype=ta), torch.ones(2, dtype=tb)
    scalar_a, scalar_b = torch.ones((), dtype=ta), torch.ones((), dtype=tb)
    cases = {
        "tensor-tensor": (dtypes.result_type([a, b]), torch.result_type(vector_a, vector_b)),
        "tensor-0d": (dtypes.result_type([a], [b]), torch.result_type(vector_a, scalar_b)),
        "0d-0d": (dtypes.result_type([], [a, b]), torch.result_type(scalar_a, scalar_b)),
    }
    for form, (got, expected) in cases.items():
        assert got.name == str(expected).removeprefix("torch."), f"{form}: {a.name}, {b.name}"


@pytest.mark.parametrize("a", DTYPES, ids=[d.name for d in DTYPES])
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_result_type_with_python_number_matches_torch(torch, a, scalar):
    ta = torch_dtype(torch, a)
    expected = torch.result_type(torch.ones(2, dtype=ta), scalar)
    assert dtypes.result_type([a], scalars=[scalar]).name == str(expected).removeprefix("torch.")
    expected_0d = torch.result_type(torch.ones((), dtype=ta), scalar)
    assert dtypes.result_type([], [a], [scalar]).name == str(expected_0d).removeprefix("torch.")


def _to_torch(torch, array):
    if array.dtype.name == "bfloat16":  # torch.from_numpy does not know ml_dtypes' bfloat16
        return torch.from_numpy(np.array(array, np.float32, order="C")).to(torch.bfloat16)
    return torch.from_numpy(np.array(array, order="C"))


@pytest.mark.parametrize("a,b", PAIRS, ids=pair_ids)
def test_add_matches_torch(torch, rng, a, b):
    x = sample(rng, a, (2, 3))
    others = {"tensor": sample(rng, b, (3,)), "0d": sample(rng, b, ())}
    for form, y in others.items():
        got = fxkit.add(fxkit.from_numpy(x), fxkit.from_numpy(y))
        expected = torch.add(_to_torch(torch, x), _to_torch(torch, y))
        assert got.dtype.name == str(expected.dtype).removeprefix("torch."), f"{form}: {a.name} + {b.name}"
        np.testing.assert_allclose(got.numpy().astype(np.float64), expected.double().numpy(), rtol=1e-3)


@pytest.mark.parametrize("a", DTYPES, ids=[d.name for d in DTYPES])
@pytest.mark.parametrize("scalar", [True, 3, 2.5], ids=repr)
def test_add_python_number_matches_torch(torch, rng, a, scalar):
    x = sample(rng, a, (4,))
    got = fxkit.add(fxkit.from_numpy(x), scalar)
    expected = torch.add(_to_torch(torch, x), scalar)
    assert got.dtype.name == str(expected.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.double().numpy(), rtol=1e-3)


@pytest.mark.parametrize("name", ["eq", "lt", "maximum", "where", "div", "clamp"])
@pytest.mark.parametrize("a,b", [(fxkit.int64, fxkit.float32), (fxkit.uint8, fxkit.int8),
                                 (fxkit.float16, fxkit.float64), (fxkit.bool, fxkit.int32),
                                 (fxkit.int32, fxkit.int32)], ids=lambda d: d.name)
def test_other_elementwise_ops_promote_like_torch(torch, rng, name, a, b):
    x, y = sample(rng, a, (4,)), sample(rng, b, (4,))
    if b is not fxkit.bool:
        y += 1  # nonzero divisors
    tx, ty = _to_torch(torch, x), _to_torch(torch, y)
    fx, fy = fxkit.from_numpy(x), fxkit.from_numpy(y)
    if name == "where":
        cond = rng.random(4) < 0.5
        got, expected = fxkit.where(fxkit.from_numpy(cond), fx, fy), torch.where(_to_torch(torch, cond), tx, ty)
    elif name == "clamp":
        got, expected = fxkit.clamp(fx, min=fy), torch.clamp(tx, min=ty)
    else:
        got, expected = getattr(fxkit, name)(fx, fy), getattr(torch, name)(tx, ty)
    assert got.dtype.name == str(expected.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.double().numpy(), rtol=1e-3)


# -- without PyTorch ----------------------------------------------------------
def _t(dtype, shape=(3,)):
    """A tensor of ``dtype`` with nonzero values."""
    return fxkit.from_numpy((np.arange(1, 1 + int(np.prod(shape))) % 2 + 1).reshape(shape).astype(dtype.np))


EXPECTED = [
    # (description, thunk computing the result, expected dtype)
    ("int32 + 1.5", lambda: _t(fxkit.int32) + 1.5, fxkit.float32),
    ("int64 + 1", lambda: _t(fxkit.int64) + 1, fxkit.int64),
    ("int8 * 2", lambda: _t(fxkit.int8) * 2, fxkit.int8),
    ("float16 + 1.0", lambda: _t(fxkit.float16) + 1.0, fxkit.float16),
    ("float32 + 0-d float64", lambda: _t(fxkit.float32) + _t(fxkit.float64, ()), fxkit.float32),
    ("int8 + 0-d int64", lambda: _t(fxkit.int8) + _t(fxkit.int64, ()), fxkit.int8),
    ("int8 + 0-d float64 (a higher category)", lambda: _t(fxkit.int8) + _t(fxkit.float64, ()), fxkit.float64),
    ("int64 + float16 tensor", lambda: _t(fxkit.int64) + _t(fxkit.float16), fxkit.float16),
    ("uint8 + int8", lambda: _t(fxkit.uint8) + _t(fxkit.int8), fxkit.int16),
    ("bool + bool", lambda: _t(fxkit.bool) + _t(fxkit.bool), fxkit.bool),
    ("bool + 1", lambda: _t(fxkit.bool) + 1, fxkit.int64),
    ("bool + 1.5", lambda: _t(fxkit.bool) + 1.5, fxkit.float32),
    ("int64 / int64", lambda: _t(fxkit.int64) / _t(fxkit.int64), fxkit.float32),
    ("int32 // int32", lambda: _t(fxkit.int32) // _t(fxkit.int32), fxkit.int32),
    ("div(int64, int64, rounding_mode='floor')", lambda: fxkit.div(_t(fxkit.int64), 2, rounding_mode="floor"),
     fxkit.int64),
    ("float16 / 2", lambda: _t(fxkit.float16) / 2, fxkit.float16),
    ("exp(int64)", lambda: fxkit.exp(_t(fxkit.int64)), fxkit.float32),
    ("sigmoid(bool)", lambda: fxkit.sigmoid(_t(fxkit.bool)), fxkit.float32),
    ("relu(int8)", lambda: fxkit.relu(_t(fxkit.int8)), fxkit.int8),
    ("floor(int32)", lambda: fxkit.floor(_t(fxkit.int32)), fxkit.int32),
    ("clamp(int64, min=0.5)", lambda: fxkit.clamp(_t(fxkit.int64), min=0.5), fxkit.float32),
    ("clamp(int64, min=0, max=1)", lambda: fxkit.clamp(_t(fxkit.int64), min=0, max=1), fxkit.int64),
    ("int64 < 2.5", lambda: _t(fxkit.int64) < 2.5, fxkit.bool),
    ("isnan(float16)", lambda: fxkit.isnan(_t(fxkit.float16)), fxkit.bool),
    ("where(cond, int64, 2.5)", lambda: fxkit.where(_t(fxkit.bool) == 1, _t(fxkit.int64), 2.5), fxkit.float32),
    ("where(cond, 1.0, 0.0)", lambda: fxkit.where(_t(fxkit.bool) == 1, 1.0, 0.0), fxkit.float32),
    ("int64 & True", lambda: _t(fxkit.int64) & True, fxkit.int64),
    ("pow(int64, 0.5)", lambda: fxkit.pow(_t(fxkit.int64), 0.5), fxkit.float32),
    ("pow(2, int32)", lambda: fxkit.pow(2, _t(fxkit.int32)), fxkit.int32),
    ("lerp(float16, float16, 0.5)", lambda: fxkit.lerp(_t(fxkit.float16), _t(fxkit.float16), 0.5), fxkit.float16),
]


@pytest.mark.parametrize("description,compute,expected", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_promotion_without_torch(description, compute, expected):
    assert compute().dtype is expected, description


def test_result_type_without_torch():
    assert dtypes.result_type([fxkit.int32], scalars=[1.5]) is fxkit.float32
    assert dtypes.result_type([fxkit.float16], scalars=[1.0]) is fxkit.float16
    assert dtypes.result_type([fxkit.int64, fxkit.float16]) is fxkit.float16
    assert dtypes.result_type([fxkit.uint8, fxkit.int8]) is fxkit.int16
    assert dtypes.result_type([fxkit.bool, fxkit.bool]) is fxkit.bool
    assert dtypes.result_type([fxkit.float32], [fxkit.float64]) is fxkit.float32
    assert dtypes.result_type([], [fxkit.int32], [2.5]) is fxkit.float32


def test_comparison_computes_in_the_result_dtype():
    # PyTorch compares int64 with float32 in float32, where 16777217 rounds to 16777216.
    big = fxkit.from_numpy(np.array([16777217, 3]))
    assert (big == fxkit.from_numpy(np.array([16777216.0, 3.5], np.float32))).tolist() == [True, False]
