"""The functions an elementwise op's kernel template may call.

A template is a Python expression over the op's inputs ``a, b, c`` (after
dtype promotion) and its keyword arguments, e.g. ``"where(a > 0, a, a * negative_slope)"``.
It uses Python's arithmetic, comparison and bitwise operators and the
functions named here, nothing else. Fused-kernel generators (numba, CUDA C)
translate these names; `NUMPY` evaluates a template on arrays so tests can
check every template against its op's implementation.
"""
import math

import numpy as np

try:
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover - scipy is optional
    _scipy_erf = None


def erf(x):
    """Elementwise erf without requiring scipy (math.erf vectorised)."""
    x = np.asarray(x)
    if _scipy_erf is not None:
        return _scipy_erf(x).astype(x.dtype, copy=False)
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _remainder(a, b):
    return np.remainder(a, b)


NUMPY = {
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "erf": erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "rint": np.rint,
    "abs": np.abs,
    "sign": np.sign,
    "isnan": np.isnan,
    "where": np.where,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logical_not": np.logical_not,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "floor_divide": np.floor_divide,
    "remainder": _remainder,
    "pow": np.power,
}
"""Intrinsic name -> numpy function, for evaluating templates on arrays."""

NAMES = frozenset(NUMPY)
