"""maximum/minimum against a number (fxkit/runtime/ops/scalar_bounds.py) against numpy's own call
with the number, bit for bit: NaN, signed zeros, infinities and integer extremes included; and the
ops built on it (relu, relu6, clamp, the hard activations) against float64 definitions."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fxkit
import fxkit.nn.functional as F
from fxkit.runtime.ops.scalar_bounds import _MIN_SIZE, maximum_of, minimum_of

DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16]


def _values(rng, n, dtype):
    if np.dtype(dtype).kind == "f":
        v = (rng.standard_normal(n) * 8).astype(dtype)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0, -6.0], dtype)
    else:
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        specials = np.array([info.min, info.max, 0, 6], dtype)
    v[rng.integers(0, n, 64)] = rng.choice(specials, 64)
    return v


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(_MIN_SIZE, 3 * _MIN_SIZE),
       value=st.sampled_from([0, False, 6, 0.0, 6.0, -0.0, 2.5, -3]), which=st.sampled_from(["max", "min"]),
       where=st.sampled_from(["new", "in-place", "other-out"]), seed=st.integers(0, 2**32 - 1))
def test_bounds_match_numpy_with_the_number_bit_for_bit(dtype, n, value, which, where, seed):
    rng = np.random.default_rng(seed)
    a = _values(rng, n, dtype)
    ufunc, ours = (np.maximum, maximum_of) if which == "max" else (np.minimum, minimum_of)

    def call(fn):
        if where == "new":
            return fn(a.copy(), value)
        target = a.copy() if where == "in-place" else np.empty_like(a)
        source = target if where == "in-place" else a
        assert fn(source, value, out=target) is target
        return target

    try:
        expected = call(ufunc)
    except (OverflowError, TypeError) as exc:  # numpy refuses the number here: so must we, alike
        with pytest.raises(type(exc)):
            call(lambda *args, **kwargs: ours(np, *args, **kwargs))
        return
    got = call(lambda *args, **kwargs: ours(np, *args, **kwargs))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("size", [4 * 16384, 2 * _MIN_SIZE, 25088, 2 * _MIN_SIZE + 8],
                         ids=["rows-of-16384", "rows-of-8192", "rows-of-512", "no-rows"])
@pytest.mark.parametrize("layout", ["contiguous", "channels-last", "transposed"])
@pytest.mark.parametrize("where", ["new", "in-place", "other-out"])
def test_every_layout_and_output_gives_numpys_bits(size, layout, where, rng):
    flat = rng.standard_normal(size).astype(np.float32)
    flat[:3] = [np.nan, -0.0, -np.inf]
    if layout == "contiguous":
        a = flat.reshape(1, -1)
    elif layout == "channels-last":  # NCHW shape over NHWC memory, as the numba backend's convs leave it
        a = flat.reshape(1, size // 8, 8, 1).transpose(0, 2, 3, 1)
    else:
        a = flat.reshape(-1, 1).T
    expected = np.maximum(a, False)
    if where == "new":
        got = maximum_of(np, a, False)
        assert got.strides == expected.strides
    elif where == "in-place":
        got = a.copy(order="K")
        assert maximum_of(np, got, False, out=got) is got
    else:
        got = np.empty(a.shape, np.float32)
        assert maximum_of(np, a, False, out=got) is got
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_the_compiled_numpy_backend_runs_relu_through_it(rng):
    x = fxkit.from_numpy(rng.standard_normal((2, 8, 32, 32)).astype(np.float32))
    model = fxkit.nn.Sequential(fxkit.nn.Conv2d(8, 8, 3, padding=1), fxkit.nn.ReLU())
    compiled = fxkit.compile(model, backend="numpy", example_inputs=[x])
    assert "maximum_of(np, " in compiled.code, compiled.code
    np.testing.assert_allclose(compiled(x).numpy(), np.maximum(model(x).numpy(), 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["relu", "relu6", "hardsigmoid", "hardswish", "clamp_min", "clamp_max"])
def test_activations_on_large_tensors_match_float64_definitions(name, rng):
    x = (rng.standard_normal((4, 16, 32, 32)) * 5).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf] if name != "hardswish" else [np.nan, -0.0, 7.0, -7.0]
    d = x.astype(np.float64)
    expected = {"relu": lambda: np.maximum(d, 0), "relu6": lambda: np.minimum(np.maximum(d, 0), 6),
                "hardsigmoid": lambda: np.minimum(np.maximum(d + 3, 0), 6) / 6,
                "hardswish": lambda: d * np.minimum(np.maximum(d + 3, 0), 6) / 6,
                "clamp_min": lambda: np.maximum(d, -0.5), "clamp_max": lambda: np.minimum(d, 0.5)}[name]()
    t = fxkit.from_numpy(x)
    got = {"relu": lambda: F.relu(t), "relu6": lambda: F.relu6(t), "hardsigmoid": lambda: F.hardsigmoid(t),
           "hardswish": lambda: F.hardswish(t), "clamp_min": lambda: fxkit.clamp(t, min=-0.5),
           "clamp_max": lambda: fxkit.clamp(t, max=0.5)}[name]().numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-6, atol=1e-7, equal_nan=True)
    inplace = {"relu": lambda u: F.relu(u, inplace=True), "relu6": lambda u: F.relu6(u, inplace=True)}.get(name)
    if inplace is not None:
        u = fxkit.from_numpy(x.copy())
        inplace(u)
        np.testing.assert_array_equal(u.numpy(), got)
