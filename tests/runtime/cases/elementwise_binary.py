"""Cases for fxkit/runtime/ops/elementwise_binary.py."""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, randpos, torch_ref

HALF = {"rtol": 2e-3, "atol": 2e-3}


def _nonzero_ints(rng, *shape, dtype=np.int64):
    """Integers in [-9, 9] without 0, signs mixed: divisors."""
    return (rng.integers(1, 10, size=shape) * rng.choice([-1, 1], size=shape)).astype(dtype)


def _with_zeros(rng, *shape):
    return np.where(rng.random(shape) < 0.4, 0, randf(rng, *shape)).astype(np.float32)


def _bools(rng, *shape):
    return rng.random(shape) < 0.5


def _f32(x):
    return x.astype(np.float32)


# -- add, sub, mul ----------------------------------------------------------
case("add", lambda r: ((randf(r, 3, 4), randf(r, 4)), {}), lambda a, b: a + b, id="broadcast")
case("add", lambda r: ((randf(r, 3, 1), randf(r, 1, 5)), {}), lambda a, b: a + b, id="broadcast-both")
case("add", lambda r: ((randf(r, 3, 4), 2.5), {"alpha": 3}), lambda a, b, alpha: a + alpha * b, id="alpha")
case("add", lambda r: ((randi(r, 3, 4), randi(r, 4)), {"alpha": -2}), lambda a, b, alpha: a + alpha * b,
     id="int64-alpha")
case("add", lambda r: ((randi(r, 3, 4, dtype=np.int32), 1.5), {}), lambda a, b: a + b, id="int32-plus-float",
     dtype=fxkit.float32)
case("add", lambda r: ((randi(r, 5), 3), {}), lambda a, b: a + b, id="int64-plus-int")
case("add", lambda r: ((randi(r, 5, low=0, high=9, dtype=np.uint8), randi(r, 5, dtype=np.int8)), {}),
     lambda a, b: a.astype(np.int16) + b, id="uint8-int8-to-int16")
case("add", lambda r: ((_bools(r, 6), _bools(r, 6)), {}), lambda a, b: a | b, id="bool-bool")
case("add", lambda r: ((_bools(r, 6), _bools(r, 6)), {"alpha": 2}), lambda a, b, alpha: a | b, id="bool-alpha")
case("add", lambda r: ((_bools(r, 6), 2), {}), lambda a, b: a.astype(np.int64) + b, id="bool-plus-int")
case("add", lambda r: ((randf(r, 5, dtype=np.float16), 1.0), {}), lambda a, b: a + b, id="float16-plus-float",
     **HALF)
case("add", lambda r: ((randi(r, 5), randf(r, 5, dtype=np.float16)), {}), lambda a, b: a + b,
     id="int64-plus-float16", **HALF)
case("add", lambda r: ((randf(r, 3, 4), np.array(r.random() + 1)), {}), lambda a, b: a + b,
     id="float32-plus-0d-float64")
case("add", lambda r: ((np.array(r.random() + 1, np.float32), np.array(r.random() - 2, np.float32)), {}),
     lambda a, b: a + b, id="0d-0d")
case("add", lambda r: ((randf(r, 0, 4), randf(r, 4)), {}), lambda a, b: a + b, id="empty")
case("add", lambda r: ((randf(r, 4, 3).T, randf(r, 3, 8)[:, ::2]), {}), lambda a, b: a + b, id="noncontiguous")
case("sub", lambda r: ((randf(r, 3, 4), randf(r, 3, 1)), {}), lambda a, b: a - b)
case("sub", lambda r: ((randf(r, 3, 4), randf(r, 4)), {"alpha": 0.5}), lambda a, b, alpha: a - alpha * b,
     id="alpha")
case("sub", lambda r: ((2.5, randf(r, 3, 4)), {}), lambda a, b: a - b, id="number-minus-tensor")
case("sub", lambda r: ((randi(r, 5, dtype=np.int8), 0.25), {}), lambda a, b: a - b, id="int8-minus-float",
     dtype=fxkit.float32)
case("sub", lambda r: ((randf(r, 6, dtype=np.float16)[::2], randf(r, 3, dtype=np.float16)), {}),
     lambda a, b: a - b, id="float16-noncontiguous", **HALF)
case("mul", lambda r: ((randf(r, 3, 4), randf(r, 4)), {}), lambda a, b: a * b)
case("mul", lambda r: ((_bools(r, 6), _bools(r, 6)), {}), lambda a, b: a & b, id="bool-bool")
case("mul", lambda r: ((randi(r, 5), 0.5), {}), lambda a, b: a * b, id="int64-times-float", dtype=fxkit.float32)
case("mul", lambda r: ((randf(r, 2, 0), randf(r, 1, 0)), {}), lambda a, b: a * b, id="empty")

# -- division -----------------------------------------------------------------
case("div", lambda r: ((randf(r, 3, 4), randpos(r, 4)), {}), lambda a, b: a / b)
case("div", lambda r: ((randi(r, 3, 4), _nonzero_ints(r, 4)), {}), lambda a, b: a / b, id="int64-int64-to-float32",
     dtype=fxkit.float32)
case("div", lambda r: ((randi(r, 4, dtype=np.int32), 4), {}), lambda a, b: a / b, id="int32-by-int-to-float32",
     dtype=fxkit.float32)
case("div", lambda r: ((1.0, randpos(r, 3, 4)), {}), lambda a, b: a / b, id="number-by-tensor")
case("div", lambda r: ((randf(r, 5, dtype=np.float16), randpos(r, 5, dtype=np.float16)), {}), lambda a, b: a / b,
     id="float16", **HALF)
case("div", lambda r: ((_bools(r, 4), np.ones(4, bool)), {}), lambda a, b: a / b, id="bool-to-float32",
     dtype=fxkit.float32)
for _mode, _ref in (("trunc", lambda a, b: np.trunc(a / b)), ("floor", lambda a, b: np.floor(a / b))):
    case("div", lambda r, m=_mode: ((randf(r, 3, 4) * 5, randpos(r, 4) * np.array([1, -1, 1, -1], np.float32)),
                                    {"rounding_mode": m}),
         lambda a, b, rounding_mode, f=_ref: f(a, b), id=f"{_mode}-float")
    case("div", lambda r, m=_mode: ((randi(r, 3, 4, low=-20, high=20), _nonzero_ints(r, 4)), {"rounding_mode": m}),
         lambda a, b, rounding_mode, f=_ref: f(a, b).astype(np.int64), id=f"{_mode}-int64-stays-int")
    case("div", lambda r, m=_mode: ((randi(r, 6, low=-20, high=20), _nonzero_ints(r, 6)), {"rounding_mode": m}),
         torch_ref(lambda a, b, rounding_mode: a.div(b, rounding_mode=rounding_mode)), id=f"torch-{_mode}-int64")
    case("div", lambda r, m=_mode: ((randf(r, 8) * 7, randf(r, 8)), {"rounding_mode": m}),
         torch_ref(lambda a, b, rounding_mode: a.div(b, rounding_mode=rounding_mode)), id=f"torch-{_mode}-float")
case("div", lambda r: ((randi(r, 5, low=0, high=200, dtype=np.uint8), 7), {"rounding_mode": "trunc"}),
     lambda a, b, rounding_mode: a // b, id="trunc-uint8")
case("floor_divide", lambda r: ((randi(r, 3, 4, low=-20, high=20), _nonzero_ints(r, 4)), {}),
     lambda a, b: a // b, id="int64-negatives")
case("floor_divide", lambda r: ((randf(r, 3, 4) * 5, randf(r, 4)), {}), lambda a, b: np.floor_divide(a, b),
     id="float")
case("floor_divide", lambda r: ((randi(r, 8, low=-20, high=20), -3), {}), torch_ref(lambda a, b: a.floor_divide(b)),
     id="torch-negative-divisor")
case("floor_divide", lambda r: ((randf(r, 8) * 9, randf(r, 8)), {}), torch_ref(lambda a, b: a.floor_divide(b)),
     id="torch-float")
case("remainder", lambda r: ((randi(r, 3, 4, low=-20, high=20), _nonzero_ints(r, 4)), {}), lambda a, b: a % b,
     id="int64-negatives")
case("remainder", lambda r: ((randf(r, 3, 4) * 5, randf(r, 4)), {}), lambda a, b: np.remainder(a, b), id="float")
case("remainder", lambda r: ((-7, randi(r, 3, 4, low=1, high=9)), {}), lambda a, b: a % b, id="number-mod-tensor")
case("remainder", lambda r: ((randi(r, 8, low=-20, high=20), _nonzero_ints(r, 8)), {}),
     torch_ref(lambda a, b: a.remainder(b)), id="torch-int64")
case("remainder", lambda r: ((randf(r, 8) * 9, randf(r, 8)), {}), torch_ref(lambda a, b: a.remainder(b)),
     id="torch-float")

# -- pow, maximum, minimum ----------------------------------------------------
case("pow", lambda r: ((randpos(r, 3, 4), randf(r, 4)), {}), np.power)
case("pow", lambda r: ((randi(r, 5), 2), {}), np.power, id="int64-squared")
case("pow", lambda r: ((2, randi(r, 5, low=0, high=10)), {}), np.power, id="number-to-int-tensor")
case("pow", lambda r: ((randi(r, 5, low=0, high=9, dtype=np.int32), 0.5), {}), np.power, id="int32-to-float-power",
     dtype=fxkit.float32)
case("pow", lambda r: ((randf(r, 5), randi(r, 5, low=0, high=4)), {}), np.power, id="float-to-int-tensor")
case("pow", lambda r: ((randpos(r, 4, dtype=np.float16), 1.5), {}), np.power, id="float16", **HALF)
case("maximum", lambda r: ((randf(r, 3, 4), randf(r, 4)), {}), np.maximum)
case("maximum", lambda r: ((np.array([1.0, np.nan, 2.0], np.float32), randf(r, 3)), {}), np.maximum,
     id="nan-propagates")
case("maximum", lambda r: ((randi(r, 5), randf(r, 5)), {}), np.maximum, id="int64-float32")
case("minimum", lambda r: ((randf(r, 3, 4), randf(r, 3, 1)), {}), np.minimum)
case("minimum", lambda r: ((randf(r, 3), np.array([np.nan, 0.5, np.nan], np.float32)), {}), np.minimum,
     id="nan-propagates")
case("minimum", lambda r: ((randi(r, 5, dtype=np.int8), randi(r, 5, dtype=np.int8)), {}), np.minimum, id="int8")

# -- comparisons --------------------------------------------------------------
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal}


def _ties(rng, *shape):
    """Small integers as floats, so equal elements occur."""
    return rng.integers(-2, 3, size=shape).astype(np.float32)


for _name, _ufunc in _COMPARE.items():
    case(_name, lambda r: ((_ties(r, 3, 4), _ties(r, 4)), {}), _ufunc, id="broadcast-ties")
    case(_name, lambda r: ((randi(r, 6, low=-2, high=3), 0.5), {}), _ufunc, id="int64-vs-float")
    case(_name, lambda r: ((randi(r, 6, low=-2, high=3, dtype=np.int8), _ties(r, 6)), {}), _ufunc,
         id="int8-vs-float32")
    # int64 values that float32 cannot hold: PyTorch compares them in float32, the result dtype.
    case(_name, lambda r: ((np.array([16777217, 16777216, -16777217, 3]), np.array([16777216.0, 16777216.0,
                                                                                      -16777216.0, 3.5], np.float32)),
                           {}),
         lambda a, b, f=_ufunc: f(_f32(a), _f32(b)), id="int64-vs-float32-precision")
case("eq", lambda r: ((np.array([16777217, 5]), np.array([16777216.0, 5.5], np.float32)), {}),
     torch_ref(lambda a, b: a.eq(b.float())), id="torch-int64-vs-float32")
case("lt", lambda r: ((np.array(r.random(), np.float32), randf(r, 3)), {}), np.less, id="0d")
case("ge", lambda r: ((randf(r, 0, 2), 0.0), {}), np.greater_equal, id="empty")

# -- logical and bitwise ------------------------------------------------------
for _name in ("logical_and", "logical_or", "logical_xor"):
    _ufunc = getattr(np, _name)
    case(_name, lambda r: ((_with_zeros(r, 3, 4), _with_zeros(r, 4)), {}), _ufunc, id="float")
    case(_name, lambda r: ((_bools(r, 5), _bools(r, 5)), {}), _ufunc, id="bool")
    case(_name, lambda r: ((randi(r, 5, low=-1, high=2), _with_zeros(r, 5)), {}), _ufunc, id="int64-float32")
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _ufunc = getattr(np, _name)
    case(_name, lambda r: ((randi(r, 3, 4, low=-50, high=50), randi(r, 4, low=-50, high=50)), {}), _ufunc)
    case(_name, lambda r: ((_bools(r, 5), _bools(r, 5)), {}), _ufunc, id="bool")
    case(_name, lambda r: ((randi(r, 5, low=0, high=255, dtype=np.uint8), 0x0F), {}), _ufunc, id="uint8-int")
    case(_name, lambda r: ((randi(r, 5, dtype=np.int8), randi(r, 5, dtype=np.int32)), {}), _ufunc,
         id="int8-int32")

# -- where, lerp --------------------------------------------------------------
case("where", lambda r: ((_bools(r, 3, 4), randf(r, 3, 4), randf(r, 4)), {}), np.where)
case("where", lambda r: ((_bools(r, 3, 1), randf(r, 1, 4), randf(r, 3, 4)), {}), np.where, id="broadcast-condition")
case("where", lambda r: ((_bools(r, 5), 1.0, 0.0), {}), np.where, id="numbers-float32", dtype=fxkit.float32)
case("where", lambda r: ((_bools(r, 5), 1, 0), {}), np.where, id="numbers-int64", dtype=fxkit.int64)
case("where", lambda r: ((_bools(r, 5), randi(r, 5), 2.5), {}), np.where, id="int64-or-float-to-float32",
     dtype=fxkit.float32)
case("where", lambda r: ((_bools(r, 5), randf(r, 5, dtype=np.float16), 2.5), {}), np.where, id="float16-or-float")
case("where", lambda r: ((_bools(r, 5), randf(r, 5), np.array(2.5)), {}), np.where, id="float32-or-0d-float64")
case("where", lambda r: ((_bools(r, 4, 3).T, randf(r, 3, 4), randf(r, 4, 3).T), {}), np.where, id="noncontiguous")


def _lerp(a, b, w):
    return a + w * (b - a)


case("lerp", lambda r: ((randf(r, 3, 4), randf(r, 3, 4), 0.3), {}), _lerp, id="small-weight")
case("lerp", lambda r: ((randf(r, 3, 4), randf(r, 4), 0.8), {}), _lerp, id="large-weight-broadcast")
case("lerp", lambda r: ((randf(r, 3, 4), randf(r, 3, 4), 1.0), {}), lambda a, b, w: b, id="weight-one-exact",
     rtol=0, atol=0)
case("lerp", lambda r: ((randf(r, 4), randf(r, 4), _f32(r.random((3, 4)) * 2 - 0.5)), {}), _lerp,
     id="tensor-weight-broadcast")
case("lerp", lambda r: ((randf(r, 3), randf(r, 3), np.array(0.75)), {}), _lerp, id="0d-weight")
case("lerp", lambda r: ((randf(r, 5, dtype=np.float16), randf(r, 5, dtype=np.float16), 0.6), {}), _lerp,
     id="float16", **HALF)
case("lerp", lambda r: ((randi(r, 5), randi(r, 5), 0.25), {}), _lerp, id="int64-to-float32", dtype=fxkit.float32)
case("lerp", lambda r: ((randf(r, 6), randf(r, 6), randf(r, 6)), {}), torch_ref(lambda a, b, w: a.lerp(b, w)),
     id="torch")

# -- shifts (torch.bitwise_left_shift / bitwise_right_shift, the << and >> operators) ---------------
for _name, _ufunc in (("bitwise_left_shift", np.left_shift), ("bitwise_right_shift", np.right_shift)):
    case(_name, lambda r: ((randi(r, 3, 4, low=-50, high=50), randi(r, 4, low=0, high=5)), {}), _ufunc)
    case(_name, lambda r: ((randi(r, 5, low=0, high=255, dtype=np.uint8), 2), {}), _ufunc, id="uint8-int")
    case(_name, lambda r: ((randi(r, 5, low=-9, high=9, dtype=np.int8), randi(r, 5, low=0, high=4, dtype=np.int32)),
                           {}), _ufunc, id="int8-int32")
