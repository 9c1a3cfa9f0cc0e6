"""The functions an elementwise op's kernel template may call.

A template is a Python expression over the op's inputs ``a, b, c`` (after
dtype promotion) and its keyword arguments, e.g. ``"where(a > 0, a, a * negative_slope)"``.
It uses Python's arithmetic, comparison and bitwise operators, numeric
constants and the functions named in `NUMPY`, nothing else. Fused-kernel
generators (numba, CUDA C) translate these names; `NUMPY` evaluates a template
on arrays so tests can check every template against its op's implementation.

numpy has no ``erf``, and scipy is not a dependency, so `erf` is computed here
from polynomial and rational approximations (fitted with mpmath to the exact
function), accurate to about 2 ulp in float64 and correctly rounded in float32
for nearly every input.
"""
import functools

import numpy as np

# erf(x) / x as a polynomial in t = x * x, for |x| < 1 (max error 7e-18).
_ERF_SMALL = (1.1283791670955126, -0.37612638903183543, 0.11283791670945006, -0.02686617064323777,
              0.0052239776071164225, -0.0008548325975389692, 0.00012055294904839707, -1.492473690741966e-05,
              1.6447424703317362e-06, -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10)
# exp(x * x) * erfc(x) * (3 + x) as a polynomial in z = (3 - x) / (3 + x), for 1 <= x <= 6
# (max error 1.4e-16); erf(x) is 1.0 in float64 beyond 6.
_ERF_LARGE = (1.0740069070883398, 0.8833944531698887, 0.5902283571040894, 0.3104672618994273,
              0.11952776128931085, 0.026827234697027785, -0.0012124167633733429, -0.0030340639754279255,
              -0.0005483053852033396, 0.0002768034651388238, 0.00010749400761302384, -3.0544863992580704e-05,
              -1.6959729423846043e-05, 4.914185183974767e-06, 1.2297579261345913e-06)
# erf(x) / x as P(t) / Q(t), t = x * x, for |x| <= 4 (max relative error 2e-9, enough for
# float32 and float16, whose erf is 1.0 beyond 4).
_ERF_P = (1.1283791693639043, 0.1852034965917181, 0.05431690472283414, 0.0038496176380661117,
          0.0003796072194213666, 4.684725404022899e-06, -1.3201977344667881e-08)
_ERF_Q = (1.0, 0.4974657390988317, 0.11395849174339592, 0.015462095413279829, 0.0013075689790057827,
          6.311009241164768e-05)
_BLOCK = 32768  # elements per block of a large array


def _horner(t, coefficients):
    """``sum(c[k] * t**k)`` in a fresh buffer, updated in place."""
    out = t * coefficients[-1]
    out += coefficients[-2]
    for c in coefficients[-3::-1]:
        out *= t
        out += c
    return out


def erf(xp, x):
    """The error function of a floating-point array, in its dtype, on numpy or cupy.

    float64 takes two polynomials (Taylor-like near 0, ``1 - exp(-x²)·p(z) / (3 + x)``
    further out); narrower floats are evaluated in float64 with one rational
    function and rounded once, as cheap as it gets without losing accuracy.

    Example:
        >>> erf(np, np.array([0.5], np.float32))
        array([0.5204999], dtype=float32)
    """
    if not x.ndim:  # numpy computes on 0-d arrays as scalars, which `out=` cannot take
        return _erf(xp, x.reshape(1)).reshape(())
    if xp is not np or x.size <= _BLOCK:
        return _erf(xp, x)
    # NOTE: a dozen float64 temporaries a block: blocks that stay in cache run twice as fast.
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, _BLOCK):
        out[start:start + _BLOCK] = _erf(xp, flat[start:start + _BLOCK])
    return out.reshape(x.shape)


def _erf(xp, x):
    if x.dtype.itemsize < 8:
        wide = x.astype(np.float64)
        xp.minimum(wide, 4.0, out=wide)
        xp.maximum(wide, -4.0, out=wide)
        t = wide * wide
        out = _horner(t, _ERF_P)
        out *= wide
        out /= _horner(t, _ERF_Q)
        return out.astype(x.dtype)
    ax = xp.abs(x)
    xp.minimum(ax, 6.0, out=ax)  # NOTE: also keeps inf out of the unselected branch
    t = ax * ax
    small = _horner(t, _ERF_SMALL)
    small *= x
    d = ax + 3.0
    z = 3.0 - ax
    z /= d
    large = _horner(z, _ERF_LARGE)
    large /= d
    xp.negative(t, out=t)
    xp.exp(t, out=t)
    large *= t
    xp.subtract(1.0, large, out=large)
    xp.copysign(large, x, out=large)
    return xp.where(ax < 1.0, small, large)


NUMPY = {
    # math functions, elementwise on floats
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "erf": functools.partial(erf, np),
    # rounding: rint rounds half to even, trunc toward zero
    "floor": np.floor,
    "ceil": np.ceil,
    "rint": np.rint,
    "trunc": np.trunc,
    "abs": np.abs,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    # selection; maximum and minimum propagate NaN
    "where": np.where,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logical_not": np.logical_not,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    # Python's division semantics: floor_divide rounds toward -inf, remainder has the sign of b
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "pow": np.power,
}
"""Intrinsic name -> numpy function, for evaluating templates on arrays."""

NAMES = frozenset(NUMPY)
