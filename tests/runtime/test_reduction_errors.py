"""Error messages (and the one warning) of the reductions and the softmax family:
each names the op and the offending dim, dtype or shape; shape rules raise the same."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from tests.runtime.opcheck import randf, randi


def t(array):
    return fxkit.from_numpy(array)


def meta(*shape, dtype=fxkit.float32):
    return TensorMeta(shape, dtype)


RANGE = r"dimension out of range \(expected to be in range of \[-2, 1\], but got {}\)"


@pytest.mark.parametrize("name, args, kwargs", [
    ("sum", (), {"dim": 2}),
    ("mean", (), {"dim": (0, -3)}),
    ("prod", (), {"dim": 2}),
    ("max", (2,), {}),
    ("amax", (), {"dim": (2,)}),
    ("argmin", (), {"dim": -3}),
    ("all", (), {"dim": 2}),
    ("cumsum", (2,), {}),
    ("var", (), {"dim": 2}),
    ("logsumexp", (-3,), {}),
    ("softmax", (), {"dim": 2}),
    ("log_softmax", (), {"dim": -3}),
    ("norm", (), {"dim": 2}),
])
def test_dimension_out_of_range_names_the_dim_and_range(rng, name, args, kwargs):
    bad = [d for d in (*args, *kwargs.values()) for d in (d if isinstance(d, tuple) else (d,)) if d in (2, -3)][0]
    message = f"{name}: " + RANGE.format(bad)
    with pytest.raises(IndexOutOfRangeError, match=message):
        getattr(ops, name)(t(randf(rng, 3, 4)), *args, **kwargs)
    with pytest.raises(IndexOutOfRangeError, match=message):
        getattr(ops, name).shape_rule(meta(3, 4), *args, **kwargs)


def test_0d_tensors_accept_dims_0_and_minus_1_only(rng):
    with pytest.raises(IndexOutOfRangeError, match=r"sum: dimension out of range \(expected to be in range of "
                                                   r"\[-1, 0\], but got 1\)"):
        t(randf(rng, 1).reshape(())).sum(1)


def test_a_dim_named_twice(rng):
    with pytest.raises(IndexOutOfRangeError, match=r"sum: dim \(0, -2\) names a dimension twice"):
        t(randf(rng, 3, 4)).sum(dim=(0, -2))


def test_single_dim_ops_refuse_a_tuple_with_a_hint(rng):
    with pytest.raises(DTypeError, match=r"max: dim must be an int, got \(0, 1\); use amax to reduce several dims"):
        t(randf(rng, 3, 4)).max((0, 1))
    with pytest.raises(DTypeError, match=r"min: dim must be an int, got \(0, 1\); use amin"):
        ops.min.shape_rule(meta(3, 4), (0, 1))


def test_max_of_an_empty_tensor_needs_a_dim(rng):
    with pytest.raises(ShapeError, match=r"max\(\): Expected reduction dim to be specified for input.numel\(\) == 0. "
                                         r"Specify the reduction dim with the 'dim' argument."):
        t(np.zeros((0, 3), np.float32)).max()
    with pytest.raises(ShapeError, match=r"argmax\(\): Expected reduction dim to be specified"):
        t(np.zeros((0, 3), np.float32)).argmax()
    with pytest.raises(ShapeError, match=r"amin\(\): Expected reduction dim to be specified"):
        t(np.zeros((0, 3), np.float32)).amin()


def test_max_over_an_empty_dim_names_it(rng):
    with pytest.raises(IndexOutOfRangeError, match=r"max\(\): Expected reduction dim 0 to have non-zero size "
                                                   r"\(input shape \[0, 3\]\)"):
        t(np.zeros((0, 3), np.float32)).max(0)
    with pytest.raises(IndexOutOfRangeError, match=r"amax\(\): Expected reduction dim 0 to have non-zero size"):
        t(np.zeros((0, 3), np.float32)).amax((0, 1))
    with pytest.raises(IndexOutOfRangeError, match=r"norm\(\): Expected reduction dim 1 to have non-zero size"):
        t(np.zeros((2, 0), np.float32)).norm(p=float("inf"), dim=1)


def test_mean_of_integers_says_to_pass_a_dtype(rng):
    message = (r"mean\(\): could not infer output dtype. Input dtype must be either a floating point or complex "
               r"dtype. Got: int64; pass dtype=fxkit.float32 or cast with .float\(\)")
    with pytest.raises(DTypeError, match=message):
        t(randi(rng, 3, 4)).mean()
    with pytest.raises(DTypeError, match=message):
        ops.mean.shape_rule(meta(3, 4, dtype=fxkit.int64))


@pytest.mark.parametrize("name", ["var", "std", "softmax", "log_softmax", "norm"])
def test_float_only_ops_refuse_integers(rng, name):
    with pytest.raises(DTypeError, match=rf"{name}: needs a floating point tensor, got int32"):
        getattr(ops, name)(t(randi(rng, 3, 4, dtype=np.int32)))
    with pytest.raises(DTypeError, match=rf"{name}: needs a floating point tensor, got int32"):
        getattr(ops, name).shape_rule(meta(3, 4, dtype=fxkit.int32))


def test_var_takes_unbiased_or_correction_not_both(rng):
    with pytest.raises(DTypeError, match=r"var: pass either unbiased= or correction=, not both"):
        t(randf(rng, 3, 4)).var(1, unbiased=False, correction=0)


def test_var_without_degrees_of_freedom_warns_and_gives_nan(rng):
    with pytest.warns(UserWarning, match=r"var\(\): degrees of freedom is <= 0 \(correction=1 with 1 elements"):
        out = t(randf(rng, 3, 1)).var(1)
    assert out.shape == (3,) and np.isnan(out.numpy()).all()


def test_norm_orders_it_does_not_know(rng):
    x = t(randf(rng, 2, 3, 4))
    with pytest.raises(ShapeError, match=r"norm: p='abc' is not supported; use 'fro', 'nuc' or a number"):
        x.norm(p="abc")
    with pytest.raises(ShapeError, match=r"norm: p='nuc' is a matrix norm and needs exactly 2 dims, got dim=1"):
        x.norm(p="nuc", dim=1)
    with pytest.raises(ShapeError, match=r"norm: p='fro' takes at most 2 dims, got dim=\(0, 1, 2\)"):
        ops.norm.shape_rule(meta(2, 3, 4), p="fro", dim=(0, 1, 2))
