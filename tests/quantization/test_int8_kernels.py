"""The int8 kernels, on every engine, are bit-exact against an independent integer computation.

The expected values come from tests/quantization/int_reference.py: int64 accumulators
summed tap by tap, and gemmlowp's requantization evaluated per element on Python
integers. Inputs cover int8 and uint8 activations, per-tensor and per-channel
weights (with zero points), fused ReLU, multipliers above and below one, strides,
padding, dilation and groups, and accumulators near the int32 limit.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fxkit
import fxkit.backends  # noqa: F401  (registers the numba engine)
from fxkit.errors import DTypeError, FxkitError, ShapeError
from fxkit.runtime.ops import quantized_ops as Q
from tests.quantization import int_reference as ref
from tests.quantization.engines import ENGINES, running_on

RANGES = {np.int8: (-128, 127), np.uint8: (0, 255)}


@pytest.fixture(params=ENGINES)
def engine(request):
    with running_on(request.param):
        yield request.param


def _ints(rng, dtype, *shape):
    low, high = RANGES[dtype]
    return rng.integers(low, high + 1, shape).astype(dtype)


def _requant_params(rng, channels, per_channel, low=1e-4, high=4e-3):
    reals = rng.uniform(low, high, channels if per_channel else 1)
    multiplier, shift = ref.multipliers_for(reals)
    return np.broadcast_to(multiplier, (channels,)), np.broadcast_to(shift, (channels,))


def _linear_case(rng, m, k, n, x_dtype, per_channel, relu, out_dtype=np.int8, reals=(1e-4, 4e-3)):
    x = _ints(rng, x_dtype, m, k)
    w = _ints(rng, np.int8, n, k)
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    x_zp = int(rng.integers(*RANGES[x_dtype]))
    w_zp = rng.integers(-10, 10, n) if per_channel else np.zeros(n, np.int64)
    multiplier, shift = _requant_params(rng, n, per_channel, *reals)
    out_zp = int(rng.integers(*RANGES[out_dtype]))
    qmin, qmax = RANGES[out_dtype]
    acc = ref.linear_accumulators(x, w, bias, x_zp, w_zp)
    expected = ref.requantize(acc, multiplier, shift, out_zp, qmin, qmax, relu, channel_axis=1)
    args = (fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), x_zp,
            fxkit.from_numpy(w_zp.astype(np.int32)) if per_channel else 0,
            fxkit.from_numpy(multiplier.astype(np.int32)) if per_channel else int(multiplier[0]),
            fxkit.from_numpy(shift.astype(np.int32)) if per_channel else int(shift[0]), out_zp)
    return args, {"dtype": fxkit.runtime.dtypes.from_numpy(np.dtype(out_dtype)), "relu": relu}, expected


@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_linear_is_bit_exact(engine, rng, x_dtype, per_channel, relu):
    args, kwargs, expected = _linear_case(rng, 37, 53, 19, x_dtype, per_channel, relu)
    out = fxkit.quantized_linear(*args, **kwargs)
    assert out.dtype is fxkit.int8
    np.testing.assert_array_equal(out.numpy(), expected)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 70), n=st.integers(1, 12), uint8=st.booleans(),
       per_channel=st.booleans(), relu=st.booleans(), seed=st.integers(0, 2 ** 32 - 1),
       big=st.booleans())
def test_linear_is_bit_exact_for_any_shape(m, k, n, uint8, per_channel, relu, seed, big):
    rng = np.random.default_rng(seed)
    # multipliers above one (positive shifts) as well as the usual small ones
    reals = (0.5, 3.0) if big else (1e-5, 1e-2)
    args, kwargs, expected = _linear_case(rng, m, k, n, np.uint8 if uint8 else np.int8, per_channel, relu,
                                          out_dtype=np.uint8 if seed % 2 else np.int8, reals=reals)
    for name in ENGINES:
        with running_on(name):
            np.testing.assert_array_equal(fxkit.quantized_linear(*args, **kwargs).numpy(), expected, err_msg=name)


def test_linear_accumulators_near_the_int32_limit(engine, rng):
    k = Q.MAX_REDUCTION
    x = np.full((2, k), 255, np.uint8)
    x[1] = 0
    w = np.full((3, k), -128, np.int8)
    w[1] = 127
    w_zp = np.array([127, -128, 0])  # (x - 0) * (w - w_zp) reaches 255 * -255 and 255 * 255
    bias = np.array([0, 5, -7], np.int32)
    multiplier, shift = ref.multipliers_for([3e-9, 2e-9, 5e-9])
    acc = ref.linear_accumulators(x, w, bias, 0, w_zp)
    assert abs(acc).max() > 2 ** 31 * 0.999
    expected = ref.requantize(acc, multiplier, shift, 0, -128, 127, False, channel_axis=1)
    out = fxkit.quantized_linear(fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), 0,
                                 fxkit.from_numpy(w_zp.astype(np.int32)), fxkit.from_numpy(multiplier.astype(np.int32)),
                                 fxkit.from_numpy(shift.astype(np.int32)), 0)
    np.testing.assert_array_equal(out.numpy(), expected)


CONV_SHAPES = [
    # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 3, 8, 7), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((3, 4, 9, 10), (6, 2, 3, 2), (2, 1), (0, 2), (2, 1), 2),
    ((1, 6, 5, 5), (6, 1, 3, 3), (1, 2), (1, 0), (1, 1), 6),
    ((2, 1, 8, 8), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation, groups", CONV_SHAPES)
@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv2d_is_bit_exact(engine, rng, x_shape, w_shape, stride, padding, dilation, groups, x_dtype,
                             per_channel):
    x = _ints(rng, x_dtype, *x_shape)
    w = _ints(rng, np.int8, *w_shape)
    oc = w_shape[0]
    bias = rng.integers(-20000, 20000, oc).astype(np.int32)
    x_zp = int(rng.integers(*RANGES[x_dtype]))
    w_zp = rng.integers(-5, 5, oc) if per_channel else np.zeros(oc, np.int64)
    multiplier, shift = _requant_params(rng, oc, per_channel)
    relu = bool(rng.integers(2))
    acc = ref.conv2d_accumulators(x, w, bias, x_zp, w_zp, stride, padding, dilation, groups)
    expected = ref.requantize(acc, multiplier, shift, 3, -128, 127, relu, channel_axis=1)
    out = fxkit.quantized_conv2d(
        fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), x_zp,
        fxkit.from_numpy(w_zp.astype(np.int32)) if per_channel else 0,
        fxkit.from_numpy(multiplier.astype(np.int32)) if per_channel else int(multiplier[0]),
        fxkit.from_numpy(shift.astype(np.int32)) if per_channel else int(shift[0]), 3,
        stride=stride, padding=padding, dilation=dilation, groups=groups, relu=relu)
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("real", [0.75, 1e-3, 0.3, 2.5, 1.0, 0.5, 1e-9, 7.123456e-5])
def test_quantize_multiplier_matches_gemmlowp(real):
    multiplier, shift = Q.quantize_multiplier(real)
    assert (int(multiplier), int(shift)) == ref.quantize_multiplier(real)
    assert 2 ** 30 <= int(multiplier) < 2 ** 31
    assert abs(int(multiplier) * 2.0 ** (int(shift) - 31) / real - 1) < 2 ** -30


def test_requantization_rounds_like_the_real_product(rng):
    """Sanity beside exactness: the fixed-point result is the rounded real product, give or take one."""
    acc = rng.integers(-2 ** 24, 2 ** 24, 2000)
    real = 3.7e-4
    multiplier, shift = Q.quantize_multiplier(real)
    got = Q.multiply_by_quantized_multiplier(np, acc.astype(np.int32), multiplier, shift)
    assert np.abs(got - np.round(acc * real)).max() <= 1


def test_unknown_engine_names_the_registered_ones():
    with pytest.raises(FxkitError, match=r"set_quantized_engine: no engine named 'fbgemm'; registered: reference, "
                                         r"numba"):
        Q.set_quantized_engine("fbgemm")


def test_kernel_argument_errors_name_the_op_and_values(rng):
    x = fxkit.from_numpy(_ints(rng, np.int8, 4, 5))
    w = fxkit.from_numpy(_ints(rng, np.int8, 3, 6))
    with pytest.raises(ShapeError, match=r"quantized_linear: input and weight shapes cannot be multiplied "
                                         r"\(4x5 and 6x3\)"):
        fxkit.quantized_linear(x, w, None, 0, 0, 2 ** 30, -5, 0)
    with pytest.raises(DTypeError, match="quantized_linear: expected an int8 or uint8 input .* got float32"):
        fxkit.quantized_linear(x.float(), w, None, 0, 0, 2 ** 30, -5, 0)
    with pytest.raises(DTypeError, match="quantized_linear: expected an int32 bias .* got int64"):
        fxkit.quantized_linear(x, fxkit.from_numpy(_ints(rng, np.int8, 3, 5)), fxkit.tensor([1, 2, 3]), 0, 0,
                               2 ** 30, -5, 0)
    with pytest.raises(ShapeError, match=r"quantized_linear: expected one multiplier or 3 \(one per output "
                                         r"channel\), got shape \[2\]"):
        fxkit.quantized_linear(x, fxkit.from_numpy(_ints(rng, np.int8, 3, 5)), None, 0, 0,
                               fxkit.tensor(np.array([1, 2], np.int32)), -5, 0)
    with pytest.raises(DTypeError, match="quantized_conv2d: output dtype fxkit.int32 is not supported"):
        fxkit.quantized_conv2d(fxkit.from_numpy(_ints(rng, np.int8, 1, 2, 4, 4)),
                               fxkit.from_numpy(_ints(rng, np.int8, 3, 2, 3, 3)), None, 0, 0, 2 ** 30, -5, 0,
                               dtype=fxkit.int32)
    with pytest.raises(ShapeError, match=r"quantized_conv2d: weight of shape \[3, 3, 3, 3\] expects 3 input "
                                         r"channels \(groups=1\), got an input of shape \[1, 2, 4, 4\]"):
        fxkit.quantized_conv2d(fxkit.from_numpy(_ints(rng, np.int8, 1, 2, 4, 4)),
                               fxkit.from_numpy(_ints(rng, np.int8, 3, 3, 3, 3)), None, 0, 0, 2 ** 30, -5, 0)


def test_numba_engine_across_row_chunks_and_channel_splits(rng):
    """Shapes beyond one chunk of rows (64) and one tile, on the numba engine against the integer reference."""
    args, kwargs, expected = _linear_case(rng, 150, 200, 37, np.int8, True, True)
    with Q.use_quantized_engine("numba"):
        np.testing.assert_array_equal(fxkit.quantized_linear(*args, **kwargs).numpy(), expected)
    x = _ints(rng, np.uint8, 2, 8, 11, 10)
    w = _ints(rng, np.int8, 6, 8, 3, 3)
    bias = rng.integers(-20000, 20000, 6).astype(np.int32)
    multiplier, shift = _requant_params(rng, 6, True)
    acc = ref.conv2d_accumulators(x, w, bias, 17, np.zeros(6, np.int64), (1, 1), (1, 1), (1, 1), 1)
    expected = ref.requantize(acc, multiplier, shift, 3, -128, 127, False, channel_axis=1)
    with Q.use_quantized_engine("numba"):
        out = fxkit.quantized_conv2d(fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), 17, 0,
                                     fxkit.from_numpy(multiplier.astype(np.int32)),
                                     fxkit.from_numpy(shift.astype(np.int32)), 3, padding=1)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_numba_engine_repacks_a_weight_changed_in_place(rng):
    """The numba engine packs a weight once; writing into that weight afterwards must not reuse the old pack."""
    args, kwargs, _ = _linear_case(rng, 5, 40, 7, np.uint8, False, False)
    weight = args[1]
    with Q.use_quantized_engine("numba"):
        fxkit.quantized_linear(*args, **kwargs)
        weight._data[...] = _ints(rng, np.int8, 7, 40)
        got = fxkit.quantized_linear(*args, **kwargs).numpy()
    expected = fxkit.quantized_linear(*args, **kwargs).numpy()  # the reference engine
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 1200), where=st.floats(0, 1, exclude_max=True), dtype=st.sampled_from([np.int8, np.uint8]))
def test_numba_engine_sees_any_one_changed_byte_of_a_weight(size, where, dtype):
    """The unchanged-weight check compares words, by blocks, then the bytes after the last whole word."""
    from fxkit.backends.numba_int8 import _same

    values = np.arange(size, dtype=np.int64).astype(dtype)
    assert _same(values, values.copy())
    if size:
        changed = values.copy()
        changed[int(where * size)] ^= dtype(1)
        assert not _same(values, changed)


@pytest.mark.parametrize("m, k, n", [(5, 13, 16), (9, 70, 33), (70, 129, 64), (3, 300, 65), (130, 31, 130),
                                     (1, 4, 200)])
@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8])
def test_linear_across_weight_panels_is_bit_exact(engine, rng, m, k, n, w_dtype):
    """Channel counts that fill 1 to 4 vectors of the last 64-channel panel, and several panels; reduction
    lengths off a multiple of 4; signed and unsigned weights with zero points."""
    x = _ints(rng, np.uint8, m, k)
    w = _ints(rng, w_dtype, n, k)
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    w_zp = rng.integers(*RANGES[w_dtype], n)
    multiplier, shift = _requant_params(rng, n, True)
    acc = ref.linear_accumulators(x, w, bias, 200, w_zp)
    expected = ref.requantize(acc, multiplier, shift, -4, -128, 127, False, channel_axis=1)
    out = fxkit.quantized_linear(fxkit.from_numpy(x), fxkit.from_numpy(w), fxkit.from_numpy(bias), 200,
                                 fxkit.from_numpy(w_zp.astype(np.int32)), fxkit.from_numpy(multiplier.astype(np.int32)),
                                 fxkit.from_numpy(shift.astype(np.int32)), -4)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_the_numba_engine_takes_the_byte_tiles_exactly_where_the_cpu_has_vnni():
    from fxkit.backends import numba_int8, numba_int8_vnni

    assert numba_int8._VNNI == numba_int8_vnni.available()


@pytest.mark.parametrize("cpu_name, features, expected", [("generic", "", False), ("skylake-avx512", "", False),
                                                          (None, "+avx512f,+avx512bw,+avx512vnni", True),
                                                          (None, "+avx512f,+avx512bw,-avx512vnni", False)])
def test_vnni_is_used_only_when_numba_compiles_for_a_cpu_that_has_it(monkeypatch, cpu_name, features, expected):
    """``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` (a portable cache, a cross build) decide, not the host."""
    from numba.core import config

    from fxkit.backends import numba_int8_vnni

    monkeypatch.setattr(config, "CPU_NAME", cpu_name)
    monkeypatch.setattr(config, "CPU_FEATURES", features)
    assert numba_int8_vnni.available() is expected


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(0, 70), min_size=1, max_size=3), dtype=st.sampled_from([np.int8, np.int16, np.int32]))
def test_packed_weights_start_on_a_cache_line(shape, dtype):
    from fxkit.backends.numba_int8_vnni import aligned_empty

    array = aligned_empty(tuple(shape), dtype)
    assert array.shape == tuple(shape) and array.dtype == dtype and array.flags.c_contiguous
    assert array.ctypes.data % 64 == 0
