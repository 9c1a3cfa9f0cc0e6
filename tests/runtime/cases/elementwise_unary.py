"""Cases for fxkit/runtime/ops/elementwise_unary.py."""
import math

import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, randpos, torch_ref

HALF = {"rtol": 2e-3, "atol": 2e-3}
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _one(x):
    return (x,), {}


def _with_nan(rng, *shape, dtype=np.float32):
    x = randf(rng, *shape, dtype=dtype)
    x.flat[::3] = np.nan
    return x


def _with_inf(rng, *shape, dtype=np.float32):
    """NaN, +inf and -inf among random values: what tells isinf from isfinite from isnan."""
    x = randf(rng, *shape, dtype=dtype)
    x.flat[::3] = np.inf
    x.flat[1::4] = -np.inf
    x.flat[2::5] = np.nan
    return x


def _with_zeros(rng, *shape):
    x = randf(rng, *shape)
    return np.where(rng.random(shape) < 0.4, 0, x).astype(np.float32)


def _halves(rng, n=24):
    """Ties at .5 (exact in binary) mixed with random floats: round's half-to-even rule."""
    ties = rng.integers(-6, 6, size=n).astype(np.float32) + 0.5
    return np.concatenate([ties, randf(rng, n) * 5])


def _extremes(rng):
    """Large magnitudes where a naive exp overflows."""
    return np.concatenate([randf(rng, 8) * 200, [-1000.0, -100.0, -89.0, 89.0, 100.0, 1000.0]]).astype(np.float32)


def _sigmoid(x):
    """1 / (1 + exp(-x)) without overflow in the reference itself."""
    return np.exp(-np.logaddexp(0, -x))


def _torch_functional(name):
    """A torch_ref calling ``torch.nn.functional.<name>``."""

    def call(*args, **kwargs):
        import torch.nn.functional

        return getattr(torch.nn.functional, name)(*args, **kwargs)

    return torch_ref(call)


# -- neg, abs ---------------------------------------------------------------
case("neg", lambda r: _one(randf(r, 3, 4)), lambda a: -a)
case("neg", lambda r: _one(randi(r, 5, dtype=np.int8)), lambda a: -a, id="int8")
case("neg", lambda r: _one(randf(r, 4, 3).T), lambda a: -a, id="noncontiguous")
case("neg", lambda r: _one(np.array(r.random() + 1, np.float32)), lambda a: -a, id="0d")
case("neg", lambda r: _one(randf(r, 0, 3)), lambda a: -a, id="empty")
case("abs", lambda r: _one(randf(r, 3, 4)), np.abs)
case("abs", lambda r: _one(randi(r, 6, dtype=np.int32)), np.abs, id="int32")
case("abs", lambda r: _one(randf(r, 4, 6, dtype=np.float16)[:, ::2]), np.abs, id="float16-noncontiguous")

# -- math functions ---------------------------------------------------------
case("exp", lambda r: _one(randf(r, 3, 4)), np.exp)
case("exp", lambda r: _one(randi(r, 5)), np.exp, id="int64-to-float32", dtype=fxkit.float32)
case("exp", lambda r: _one(randf(r, 5, dtype=np.float16)), np.exp, id="float16", **HALF)
case("exp", lambda r: _one(np.array([True, False])), lambda a: np.exp(a.astype(np.float64)), id="bool-to-float32",
     dtype=fxkit.float32)
case("log", lambda r: _one(randpos(r, 3, 4)), np.log)
case("log", lambda r: _one(randi(r, 6, low=1, high=50)), np.log, id="int64-to-float32", dtype=fxkit.float32)
case("log1p", lambda r: _one(randpos(r, 3, 4) * 1e-4), np.log1p, rtol=1e-6)
case("log1p", lambda r: _one(randpos(r, 5, dtype=np.float64)), np.log1p, id="float64", rtol=1e-14)
case("expm1", lambda r: _one(randf(r, 3, 4) * 1e-4), np.expm1, rtol=1e-6)
case("expm1", lambda r: _one(randf(r, 6, 4)[::2]), np.expm1, id="noncontiguous")
case("sqrt", lambda r: _one(randpos(r, 3, 4)), np.sqrt)
case("sqrt", lambda r: _one(randi(r, 5, low=0, high=100, dtype=np.int32)), np.sqrt, id="int32-to-float32")
case("sin", lambda r: _one(randf(r, 3, 4) * 3), np.sin)
case("sin", lambda r: _one(randf(r, 3, dtype=np.float64)), np.sin, id="float64", rtol=1e-14)
case("cos", lambda r: _one(randf(r, 3, 4) * 3), np.cos)
case("cos", lambda r: _one(randi(r, 4, dtype=np.int8)), lambda a: np.cos(a.astype(np.float64)), id="int8-to-float32",
     dtype=fxkit.float32)
case("tanh", lambda r: _one(randf(r, 3, 4) * 3), np.tanh)
case("tanh", lambda r: _one(randf(r, 0, 4)), np.tanh, id="empty")
case("rsqrt", lambda r: _one(randpos(r, 3, 4)), lambda a: 1 / np.sqrt(a))
case("rsqrt", lambda r: _one(randpos(r, 5, dtype=np.float16)), lambda a: 1 / np.sqrt(a), id="float16", **HALF)
case("rsqrt", lambda r: _one(np.array(r.random() + 1, np.float32)), lambda a: 1 / np.sqrt(a),
     id="0d")
case("reciprocal", lambda r: _one(randpos(r, 3, 4) * np.where(r.random((3, 4)) < 0.5, -1, 1)), lambda a: 1 / a)
case("reciprocal", lambda r: _one(randi(r, 5, low=1, high=9)), lambda a: 1 / a, id="int64-to-float32",
     dtype=fxkit.float32)

# -- erf ----------------------------------------------------------------------
case("erf", lambda r: _one(randf(r, 3, 40) * 2.5), _erf)
case("erf", lambda r: _one(np.concatenate([randf(r, 200, dtype=np.float64) * 4,
                                           [0.0, -0.0, 1e-300, -1e-20, 0.9999, 1.0, 5.9, 6.5, -30.0, np.inf, -np.inf,
                                            np.nan]])),
     _erf, id="float64", rtol=1e-15, atol=0)
case("erf", lambda r: _one(randf(r, 40, dtype=np.float16) * 2), _erf, id="float16", **HALF)
case("erf", lambda r: _one((randf(r, 300, 400) * 3)[:, ::2]), _erf, id="large-noncontiguous")
case("erf", lambda r: _one(randf(r, 50000, dtype=np.float64) * 4), _erf, id="large-float64", rtol=1e-15, atol=0)
case("erf", lambda r: _one(randi(r, 7)), _erf, id="int64-to-float32", dtype=fxkit.float32)
case("erf", lambda r: _one(np.array(r.random())), _erf, id="0d", rtol=1e-15)
case("erf", lambda r: _one(randf(r, 64, dtype=np.float64) * 4), torch_ref(lambda a: a.erf()), id="torch",
     rtol=1e-14, atol=1e-300)

# -- activations ------------------------------------------------------------
case("sigmoid", lambda r: _one(randf(r, 3, 4) * 4), _sigmoid)
case("sigmoid", lambda r: _one(_extremes(r)), _sigmoid, id="extremes", atol=1e-30)
case("sigmoid", lambda r: _one(randf(r, 8, dtype=np.float16) * 6), _sigmoid, id="float16", **HALF)
case("sigmoid", lambda r: _one(randi(r, 5)), _sigmoid, id="int64-to-float32", dtype=fxkit.float32)
case("sigmoid", lambda r: _one(randf(r, 6, dtype=np.float64) * 4), _sigmoid, id="float64", rtol=1e-14)
case("sigmoid", lambda r: _one(_extremes(r)), torch_ref(lambda a: a.sigmoid()), id="torch", atol=1e-30)
case("silu", lambda r: _one(randf(r, 3, 4) * 4), lambda a: a * _sigmoid(a))
case("silu", lambda r: _one(_extremes(r)), lambda a: a * _sigmoid(a), id="extremes", atol=1e-30)
case("silu", lambda r: _one(randf(r, 8, dtype=np.float16) * 4), lambda a: a * _sigmoid(a), id="float16", **HALF)
case("silu", lambda r: _one(np.array(-r.random() - 1, np.float32)), lambda a: a * _sigmoid(a),
     id="0d")
case("silu", lambda r: _one(_extremes(r)), torch_ref(lambda a: a * a.sigmoid()), id="torch", atol=1e-30)
case("relu", lambda r: _one(randf(r, 3, 4)), lambda a: np.maximum(a, 0))
case("relu", lambda r: _one(randi(r, 6, dtype=np.int8)), lambda a: np.maximum(a, 0), id="int8")
case("relu", lambda r: _one(_with_nan(r, 6)), lambda a: np.where(np.isnan(a), a, np.maximum(a, 0)), id="nan")
case("relu", lambda r: _one(randf(r, 4, 6, dtype=np.float16).T), lambda a: np.maximum(a, 0),
     id="float16-noncontiguous")
case("leaky_relu", lambda r: _one(randf(r, 3, 4)), lambda a: np.where(a > 0, a, a * 0.01))
for _slope in (0.2, -0.5, 2.0):
    case("leaky_relu", lambda r, s=_slope: ((randf(r, 3, 4),), {"negative_slope": s}),
         lambda a, negative_slope: np.where(a > 0, a, a * negative_slope), id=f"slope{_slope}")
case("leaky_relu", lambda r: _one(randf(r, 8, dtype=np.float16)), lambda a: np.where(a > 0, a, a * 0.01),
     id="float16", **HALF)
case("leaky_relu", lambda r: ((randf(r, 3, 5),), {"negative_slope": 0.1}),
     _torch_functional("leaky_relu"), id="torch")


def _gelu(a):
    return 0.5 * a * (1 + _erf(a / math.sqrt(2)))


def _gelu_tanh(a, approximate="tanh"):
    return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))


case("gelu", lambda r: _one(randf(r, 3, 40) * 4), _gelu)
case("gelu", lambda r: ((randf(r, 3, 40) * 4,), {"approximate": "tanh"}), _gelu_tanh, id="tanh")
# NOTE: atol covers 1 + erf(x) cancelling for very negative x, where one ulp of erf is all that is left.
case("gelu", lambda r: _one(randf(r, 100, dtype=np.float64) * 6), _gelu, id="float64", rtol=1e-14, atol=1e-15)
case("gelu", lambda r: ((randf(r, 30, dtype=np.float64) * 6,), {"approximate": "tanh"}), _gelu_tanh,
     id="tanh-float64", rtol=1e-14, atol=1e-15)
case("gelu", lambda r: _one(randf(r, 16, dtype=np.float16) * 3), _gelu, id="float16", **HALF)
case("gelu", lambda r: _one(randi(r, 7)), _gelu, id="int64-to-float32", dtype=fxkit.float32)
case("gelu", lambda r: _one(np.array(r.random() - 2, np.float32)), _gelu, id="0d")
case("gelu", lambda r: _one(randf(r, 5, 8)[:, 1::2]), _gelu, id="noncontiguous")
case("gelu", lambda r: _one(randf(r, 64, dtype=np.float64) * 5), _torch_functional("gelu"), id="torch",
     rtol=1e-14, atol=1e-15)
case("gelu", lambda r: ((randf(r, 64) * 5,), {"approximate": "tanh"}), _torch_functional("gelu"), id="torch-tanh")

# -- rounding -----------------------------------------------------------------
case("floor", lambda r: _one(_halves(r)), np.floor)
case("floor", lambda r: _one(randi(r, 6)), np.floor, id="int64-kept", dtype=fxkit.int64)
case("floor", lambda r: _one(randf(r, 8, dtype=np.float16) * 5), np.floor, id="float16")
case("ceil", lambda r: _one(_halves(r)), np.ceil)
case("ceil", lambda r: _one(randi(r, 6, dtype=np.int8)), np.ceil, id="int8-kept", dtype=fxkit.int8)
case("round", lambda r: _one(_halves(r)), np.rint, id="half-to-even")
case("round", lambda r: _one(randi(r, 6, dtype=np.int32)), lambda a: a, id="int32-kept")
case("round", lambda r: _one(_halves(r).astype(np.float64)), np.rint, id="float64")


def _round_decimals(a, decimals):
    """PyTorch's definition, in float32 like its kernel: rint(a * 10**d) / 10**d."""
    scale = np.float32(10.0 ** abs(decimals))
    a = a.astype(np.float32)
    return np.rint(a * scale) / scale if decimals > 0 else np.rint(a / scale) * scale


for _d in (1, 2, -1):
    case("round", lambda r, d=_d: ((randf(r, 3, 8) * 50,), {"decimals": d}), _round_decimals, id=f"decimals{_d}")
case("round", lambda r: ((r.integers(-40, 40, 30).astype(np.float32) / 8,), {"decimals": 1}),
     torch_ref(lambda a, decimals: a.round(decimals=decimals)), id="torch-decimals")
case("round", lambda r: _one(_halves(r)), torch_ref(lambda a: a.round()), id="torch")
case("sign", lambda r: _one(np.concatenate([randf(r, 6), [0.0, -0.0, np.nan]]).astype(np.float32)),
     lambda a: np.where(np.isnan(a), 0, np.sign(a)), id="nan-is-zero")
case("sign", lambda r: _one(randi(r, 8, dtype=np.int8)), np.sign, id="int8")
case("sign", lambda r: _one(r.random(5) < 0.5), lambda a: a, id="bool")
case("sign", lambda r: _one(np.concatenate([randf(r, 6), [0.0, np.nan]])), torch_ref(lambda a: a.sign()),
     id="torch")

# -- clamp --------------------------------------------------------------------
case("clamp", lambda r: ((randf(r, 3, 4),), {"min": -0.5, "max": 0.5}), lambda a, min, max: np.clip(a, min, max))
case("clamp", lambda r: ((randf(r, 3, 4),), {"min": -0.5}), lambda a, min: np.maximum(a, min), id="min-only")
case("clamp", lambda r: ((_with_nan(r, 40, 60)[:, ::2], -0.5, 0.5), {}), lambda a, min, max: np.clip(a, min, max),
     id="large-noncontiguous-nan")
case("clamp", lambda r: ((randf(r, 40, 60),), {"min": 0.5, "max": randf(r, 60) - 1}),
     lambda a, min, max: np.minimum(np.maximum(a, min), max), id="large-tensor-max-below-min")
case("clamp", lambda r: ((randf(r, 3, 4), None, 0.25), {}), lambda a, min, max: np.minimum(a, max),
     id="max-positional")
case("clamp", lambda r: ((randf(r, 3, 4),), {"min": randf(r, 4) - 1, "max": randf(r, 3, 1) + 1}),
     lambda a, min, max: np.minimum(np.maximum(a, min), max), id="tensor-bounds-broadcast")
case("clamp", lambda r: ((randf(r, 3),), {"min": -0.5, "max": randf(r, 2, 3)}),
     lambda a, min, max: np.minimum(np.maximum(a, min), max), id="max-broadcasts-beyond-input")
case("clamp", lambda r: ((randi(r, 6),), {"min": -1, "max": 2}), lambda a, min, max: np.clip(a, min, max),
     id="int64-int-bounds")
case("clamp", lambda r: ((randi(r, 6),), {"min": 0.5}), lambda a, min: np.maximum(a, min),
     id="int64-float-bound-to-float32", dtype=fxkit.float32)
case("clamp", lambda r: ((randi(r, 6, dtype=np.int32),), {"max": np.array(1.5)}),
     lambda a, max: np.minimum(a, max), id="int32-0d-float64-bound-to-float64", dtype=fxkit.float64)
case("clamp", lambda r: ((randf(r, 6),), {"min": np.array(-0.5)}), lambda a, min: np.maximum(a, min),
     id="float32-0d-float64-bound")
case("clamp", lambda r: ((randf(r, 6, dtype=np.float16),), {"min": randf(r, 6) * 0.5}),
     lambda a, min: np.maximum(a, min), id="float16-float32-bound-to-float32", dtype=fxkit.float32, **HALF)
case("clamp", lambda r: ((_with_nan(r, 6),), {"min": 0.5, "max": -0.5}),
     lambda a, min, max: np.where(np.isnan(a), a, max), id="min-above-max-nan")
case("clamp", lambda r: ((r.random(5) < 0.5,), {"min": 0}), lambda a, min: np.maximum(a.astype(np.int64), min),
     id="bool-int-bound-to-int64")
case("clamp", lambda r: ((np.array(r.random() + 1, np.float32),), {"max": 0.5}),
     lambda a, max: np.minimum(a, max), id="0d")
case("clamp", lambda r: ((randf(r, 0, 2),), {"min": 0.0}), lambda a, min: np.maximum(a, min), id="empty")

# -- predicates and bitwise -------------------------------------------------
case("logical_not", lambda r: _one(_with_zeros(r, 3, 4)), np.logical_not)
case("logical_not", lambda r: _one(r.random(6) < 0.5), np.logical_not, id="bool")
case("logical_not", lambda r: _one(randi(r, 8)), np.logical_not, id="int64")
case("isnan", lambda r: _one(_with_nan(r, 3, 4)), np.isnan)
case("isnan", lambda r: _one(randi(r, 5)), np.isnan, id="int64")
case("isnan", lambda r: _one(_with_nan(r, 7, dtype=np.float16)), np.isnan, id="float16")
case("isinf", lambda r: _one(_with_inf(r, 3, 4)), np.isinf)
case("isinf", lambda r: _one(randi(r, 5)), np.isinf, id="int64")
case("isinf", lambda r: _one(_with_inf(r, 7, dtype=np.float16)), np.isinf, id="float16")
case("isfinite", lambda r: _one(_with_inf(r, 3, 4)), np.isfinite)
case("isfinite", lambda r: _one(randi(r, 5)), np.isfinite, id="int64")
case("isfinite", lambda r: _one(r.random(6) < 0.5), np.isfinite, id="bool")
case("bitwise_not", lambda r: _one(randi(r, 3, 4)), np.invert)
case("bitwise_not", lambda r: _one(r.random(6) < 0.5), np.invert, id="bool")
case("bitwise_not", lambda r: _one(randi(r, 6, low=0, high=255, dtype=np.uint8)), np.invert, id="uint8")

# F.relu(x, inplace=True) and friends: the result also lands in the input, as in PyTorch.
case("relu", lambda r: ((randf(r, 3, 4),), {"inplace": True}), lambda a, inplace: np.maximum(a, 0),
     id="inplace-writes-input", mutates=True)
case("leaky_relu", lambda r: ((randf(r, 5),), {"negative_slope": 0.2, "inplace": True}),
     lambda a, negative_slope, inplace: np.where(a > 0, a, a * 0.2), id="inplace-writes-input", mutates=True)
case("silu", lambda r: ((randf(r, 6),), {"inplace": True}), lambda a, inplace: a / (1 + np.exp(-a)),
     id="inplace-writes-input", mutates=True)
