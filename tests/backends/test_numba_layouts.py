"""The numba backend against eager mode on every input eager accepts: random memory layouts
(transposes, steps, size-1 dimensions, broadcasting, zero strides) through elementwise chains and
reductions, and integer ops whose eager implementation raises on some values (a division by zero,
a negative integer power), where the compiled module must raise the same error."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import ops

pytest.importorskip("numba")
RANDOM = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_UNARY = (ops.relu, ops.sigmoid, ops.tanh, ops.exp, ops.neg, ops.abs, ops.gelu, ops.silu)
_BINARY = (ops.add, ops.sub, ops.mul, ops.maximum, ops.div)
_INT_OPS = {
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "div_trunc": lambda a, b: ops.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: ops.div(a, b, rounding_mode="floor"),
    "pow": lambda a, b: a ** b,
}


@st.composite
def laid_out(draw, shape, values):
    """A tensor of logical ``shape`` in a random layout: a transpose, a step, a zero-stride broadcast."""
    ndim = len(shape)
    perm = draw(st.permutations(range(ndim))) if ndim else []
    stored = [shape[p] for p in perm]  # the array before the transpose back to ``shape``
    step_dim = draw(st.sampled_from([None] + list(range(ndim))))
    broadcast_dim = draw(st.sampled_from([None] + [d for d in range(ndim) if stored[d] > 1]))
    full = [2 * n if d == step_dim else n for d, n in enumerate(stored)]
    if broadcast_dim is not None:
        full[broadcast_dim] = 1
    array = np.asarray(values(full))
    if step_dim is not None:
        array = array[tuple(slice(None, None, 2) if d == step_dim else slice(None) for d in range(ndim))]
    if broadcast_dim is not None:
        array = np.broadcast_to(array, stored)
    inverse = tuple(np.argsort(perm)) if ndim else ()
    result = array.transpose(inverse)
    assert result.shape == tuple(shape)
    return fxkit.from_numpy(result)


@st.composite
def shapes(draw, min_dims=1):
    return tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3, 5]), min_size=min_dims, max_size=4)))


@st.composite
def broadcast_partner(draw, shape):
    """A shape that broadcasts against ``shape``: some dims set to 1, some leading dims dropped."""
    kept = shape[draw(st.integers(0, len(shape))):]
    return tuple(1 if draw(st.booleans()) else n for n in kept)


def _floats(seed):
    rng = np.random.default_rng(seed)
    return lambda shape: (rng.standard_normal(shape) * 3).astype(np.float32)


def _ints(seed, low, high, dtype):
    rng = np.random.default_rng(seed)
    return lambda shape: rng.integers(low, high, shape).astype(dtype)


@pytest.mark.slow
@RANDOM
@given(st.data())
def test_layouts_through_elementwise_chains_and_reductions_match_eager(data):
    shape = data.draw(shapes())
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = data.draw(laid_out(shape, _floats(seed)))
    y = data.draw(laid_out(data.draw(broadcast_partner(shape)), _floats(seed + 1)))
    unary, binary = data.draw(st.sampled_from(_UNARY)), data.draw(st.sampled_from(_BINARY))
    dim = data.draw(st.sampled_from([None] + list(range(len(shape)))))
    keepdim = data.draw(st.booleans())

    def f(x, y):
        z = binary(unary(x), y)
        if dim is not None:
            z = z.mean(dim, keepdim=keepdim)
        return z * 2.0

    expected = f(x, y).numpy()
    got = fxkit.compile(f, backend="numba", example_inputs=[x, y])(x, y).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-5 * max(float(np.abs(expected).max()), 1.0))


@pytest.mark.slow
@RANDOM
@given(st.data())
def test_integer_ops_with_zeros_raise_or_match_like_eager(data):
    name = data.draw(st.sampled_from(sorted(_INT_OPS)))
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    shape = data.draw(shapes())
    seed = data.draw(st.integers(0, 2**32 - 1))
    a = data.draw(laid_out(shape, _ints(seed, -9, 10, dtype)))
    low = -2 if name == "pow" else -3
    b = data.draw(laid_out(data.draw(broadcast_partner(shape)), _ints(seed + 1, low, 4, dtype)))
    fused = data.draw(st.booleans())  # inside an elementwise chain, or alone

    def f(a, b):
        if fused:
            return _INT_OPS[name](a + 1, b) * 2 - 1
        return _INT_OPS[name](a, b)

    try:
        expected = f(a, b)
    except fxkit.FxkitError as error:
        compiled = fxkit.compile(f, backend="numba", example_inputs=[a, b])
        with pytest.raises(type(error)) as raised:
            compiled(a, b)
        assert str(error).split("\n")[0] in str(raised.value)
        return
    got = fxkit.compile(f, backend="numba", example_inputs=[a, b])(a, b)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("name, a, b", [
    ("floor_divide", [5, 7, -3], [0, 2, 0]),
    ("remainder", [5, 7, -3], [0, 2, 1]),
    ("div_trunc", [5, 7, -3], [1, 0, 2]),
    ("div_floor", [5, 7, -3], [3, 2, 0]),
    ("pow", [2, 3], [-1, 2]),
])
def test_integer_errors_of_eager_mode_are_raised(name, a, b):
    a, b = fxkit.tensor(a), fxkit.tensor(b)
    with pytest.raises(fxkit.FxkitError) as eager:
        _INT_OPS[name](a, b)
    compiled = fxkit.compile(_INT_OPS[name], backend="numba", example_inputs=[a, b])
    with pytest.raises(type(eager.value)) as raised:
        compiled(a, b)
    assert str(eager.value).split("\n")[0] in str(raised.value)


def test_a_transposed_size_1_layout_through_a_mean(rng):
    # (6, 1, 8) with strides (4, 24, 24): the size-1 dimension's stride is arbitrary.
    x = fxkit.from_numpy(rng.standard_normal((8, 1, 6)).astype(np.float32)).permute(2, 1, 0)

    def f(x):
        return ops.relu(x).mean(1, keepdim=True) * 2.0

    expected = np.maximum(x.numpy().astype(np.float64), 0).mean(1, keepdims=True) * 2.0
    np.testing.assert_allclose(fxkit.compile(f, backend="numba", example_inputs=[x])(x).numpy(), expected,
                               rtol=1e-6)
