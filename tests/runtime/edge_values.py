"""Every elementwise registry op at the extremes of each float dtype, and PyTorch's answer.

The values are ``±max, ±tiny (smallest normal), ±smallest subnormal, ±inf, nan, ±0, ±1`` and,
for ops of two or three operands, every pair of them. Eager mode and every backend are checked
against PyTorch with `assert_matches_torch`: same dtype, NaN where PyTorch has NaN, the same
infinities, the same sign of zero, finite values within a few units in the last place.
`ALLOWED` lists where fxkit differs on purpose, with the reason.
"""
import numpy as np

import fxkit
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.registry import all_ops

FLOAT_DTYPES = [d for d in ("float16", "bfloat16", "float32", "float64") if getattr(_dt, d, None) is not None]
ULPS = 4
"""Units in the last place finite results may differ by: the numba and CUDA math is within 2 ulp,
and half precision rounds the float32 result once more."""


def edge_values(dtype):
    """The extremes of ``dtype`` (a name in `FLOAT_DTYPES`) as a numpy array of that dtype."""
    np_dtype = getattr(_dt, dtype).np
    info = _finfo(dtype)
    values = [info["max"], info["tiny"], info["subnormal"], np.inf, 0.0, 1.0]
    both = [x for v in values for x in (v, -v)] + [np.nan]
    return np.array(both, np.float64).astype(np_dtype)


def _finfo(dtype):
    if dtype == "bfloat16":
        return {"max": 3.3895313892515355e38, "tiny": 1.1754943508222875e-38, "subnormal": 9.183549615799121e-41,
                "eps": 2.0 ** -7}
    info = np.finfo(dtype)
    return {"max": float(info.max), "tiny": float(info.tiny), "subnormal": float(info.smallest_subnormal),
            "eps": float(info.eps)}


def _pairs(v):
    return np.repeat(v, len(v)), np.tile(v, len(v))


def _alternating(n):
    return np.arange(n) % 2 == 0


# id -> (op name, make(v) -> (args, kwargs)); arrays in args are the op's tensor inputs.
CASES = {name: (name, lambda v: ((v,), {})) for name in (
    "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "erf", "rsqrt", "reciprocal",
    "sigmoid", "silu", "relu", "leaky_relu", "floor", "ceil", "sign", "logical_not", "isnan", "isinf", "isfinite",
    "relu6",
    "hardsigmoid", "hardswish", "mish")}
CASES.update({name: (name, lambda v: (_pairs(v), {})) for name in (
    "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum", "minimum", "eq", "ne", "lt",
    "le", "gt", "ge", "logical_and", "logical_or", "logical_xor")})
CASES.update({
    "add-alpha": ("add", lambda v: (_pairs(v), {"alpha": 2})),
    "sub-alpha": ("sub", lambda v: (_pairs(v), {"alpha": 2})),
    "div-trunc": ("div", lambda v: (_pairs(v), {"rounding_mode": "trunc"})),
    "div-floor": ("div", lambda v: (_pairs(v), {"rounding_mode": "floor"})),
    "leaky_relu-steep": ("leaky_relu", lambda v: ((v, 3.0), {})),
    "gelu": ("gelu", lambda v: ((v,), {})),
    "gelu-tanh": ("gelu", lambda v: ((v,), {"approximate": "tanh"})),
    "round": ("round", lambda v: ((v,), {})),
    "round-decimals": ("round", lambda v: ((v,), {"decimals": 2})),
    "clamp": ("clamp", lambda v: ((v,), {"min": -1.0, "max": 1.0})),
    "clamp-min": ("clamp", lambda v: ((v,), {"min": 0.5})),
    "where": ("where", lambda v: ((_alternating(len(v) ** 2), *_pairs(v)), {})),
    "lerp": ("lerp", lambda v: ((*_pairs(v), 0.25), {})),
    "lerp-weights": ("lerp", lambda v: ((np.repeat(v, len(v)), np.full(len(v) ** 2, 2.0, v.dtype),
                                         np.tile(v, len(v))), {})),
    "masked_fill": ("masked_fill", lambda v: ((v, _alternating(len(v)), float("-inf")), {})),
    "threshold_backward": ("threshold_backward", lambda v: ((*_pairs(v), 0), {})),
})
INTEGER_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
                "bitwise_right_shift"}
"""Elementwise ops with no float inputs (nothing to check at float extremes)."""

def _arrays(args):
    return [np.asarray(a).astype(np.float64) for a in args if isinstance(a, np.ndarray) and a.dtype.kind != "b"]


def _bottom_of_range(dtype, args, got, expected):
    return np.logical_or.reduce([(a != 0) & (np.abs(a) <= _finfo(dtype)["tiny"]) for a in _arrays(args)])


def _zeros_of_other_sign(dtype, args, got, expected):
    return (got == 0) & (expected == 0)


def _quotient_overflows(dtype, args, got, expected):
    a, b = _arrays(args)[:2]
    with np.errstate(all="ignore"):
        return np.isfinite(a) & (np.abs(a / b) > _finfo(dtype)["max"])


def _scaled_operand_overflows(dtype, args, got, expected):
    return np.abs(_arrays(args)[1]) * 2 > _finfo(dtype)["max"]


def _doubled_overflows_float32(dtype, args, got, expected):
    return np.abs(_arrays(args)[0]) * 2 > _finfo("float32")["max"]


def _infinite_input_nan_output(dtype, args, got, expected):
    return np.isinf(_arrays(args)[0]) & np.isnan(expected)


# (case ids or None for all, dtypes or None for all, mask(dtype, args, got, expected), reason)
ALLOWED = [
    (None, None, _bottom_of_range,
     "PyTorch's vectorised CPU kernels (SLEEF, flush-to-zero in half precision) give 0 or lose the sign near "
     "and below the smallest normal number (erf, log1p, lerp of subnormals); fxkit keeps IEEE results"),
    (("relu", "relu6"), None, _zeros_of_other_sign,
     "relu(-0.0) and relu6(-0.0) are +0 (numpy's and the kernels' maximum(x, 0) return the 0); PyTorch returns "
     "-0: equal numbers"),
    (("maximum", "minimum"), None, _zeros_of_other_sign,
     "IEEE 754 leaves the sign of max/min(+0, -0) open; numpy and PyTorch's half kernels pick differently"),
    (("remainder",), None, _zeros_of_other_sign,
     "a zero remainder takes the divisor's sign in fxkit (numpy's and Python's %); PyTorch returns +0"),
    (("remainder",), None, _quotient_overflows,
     "PyTorch computes a - b * floor(a / b), which is nan once a / b overflows; fxkit's remainder is exact"),
    (("add-alpha", "sub-alpha"), None, _scaled_operand_overflows,
     "PyTorch fuses a + alpha * b into one rounding (no overflow of alpha * b); fxkit rounds alpha * b first, "
     "as the formula reads, so it overflows where 2 * |b| exceeds the dtype's max"),
    (("gelu",), ("float32", "bfloat16"), _doubled_overflows_float32,
     "PyTorch's float32 CPU gelu computes x * (1 + erf(...)) first, which overflows (gelu(max) = inf, nan at "
     "inf); fxkit returns the exact x there, as PyTorch's float64 and approximate='tanh' do"),
    (("gelu",), ("float16",), _infinite_input_nan_output,
     "PyTorch's vectorised half gelu on AVX-512 CPUs returns nan at +-inf (its scalar path and AVX2 return "
     "gelu(inf) = inf); fxkit returns inf, as PyTorch's float32 and float64 do"),
]


def uncovered_ops():
    """Elementwise registry ops no case here exercises (should be none but `INTEGER_ONLY`)."""
    covered = {op for op, _ in CASES.values()} | INTEGER_ONLY
    return sorted(o.name for o in all_ops() if o.kind == "elementwise" and o.name not in covered)


def case_inputs(case, dtype):
    """``(op name, args, kwargs)`` of a case: numpy arrays of ``dtype`` (bool masks stay bool)."""
    name, make = CASES[case]
    args, kwargs = make(edge_values(dtype))
    return name, args, kwargs


def torch_result(torch, name, args, kwargs):
    """PyTorch's answer for the op ``name`` on ``args`` (numpy arrays) as a float64/bool numpy array."""
    import torch.nn.functional as F

    functions = {"silu": F.silu, "relu": torch.relu, "leaky_relu": F.leaky_relu, "gelu": F.gelu, "relu6": F.relu6,
                 "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "mish": F.mish,
                 "masked_fill": lambda a, m, value: a.masked_fill(m, value),
                 "threshold_backward": torch.ops.aten.threshold_backward}
    fn = functions.get(name) or getattr(torch, name)
    out = fn(*[_to_torch(torch, a) for a in args], **kwargs)
    return out.to(torch.float64).numpy() if out.is_floating_point() else out.numpy()


def _to_torch(torch, value):
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype.kind == "b":
        return torch.from_numpy(value.copy())
    if value.dtype.itemsize == 2 and value.dtype != np.float16:  # bfloat16 (ml_dtypes): go through float32
        return torch.from_numpy(value.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(value.copy())


def fxkit_inputs(args):
    return [fxkit.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a for a in args]


def assert_matches_torch(got, expected, case, dtype, args, where):
    """``got`` (numpy) against PyTorch's ``expected`` element by element, minus the `ALLOWED` ones."""
    assert got.shape == expected.shape, f"{where}: shape {got.shape} != {expected.shape}"
    assert (got.dtype.kind == "b") == (expected.dtype.kind == "b"), f"{where}: dtype {got.dtype} vs {expected.dtype}"
    skip = np.zeros(expected.shape, bool)
    for cases, dtypes, predicate, _ in ALLOWED:
        if (cases is None or case in cases) and (dtypes is None or dtype in dtypes):
            skip |= predicate(dtype, args, got.astype(np.float64), expected)
    if got.dtype.kind == "b":
        bad = got != expected
    else:
        g = got.astype(np.float32 if got.dtype.itemsize == 2 else got.dtype).astype(np.float64)
        e = expected
        info = _finfo(dtype)
        close = np.abs(g - e) <= ULPS * (info["eps"] * np.abs(e) + info["subnormal"])
        same = (g == e) & (np.signbit(g) == np.signbit(e))
        nans = np.isnan(g) & np.isnan(e)
        bad = ~(nans | same | (close & np.isfinite(e) & np.isfinite(g) & (e != 0)))
    bad &= ~skip
    if bad.any():
        inputs = [a[bad] if isinstance(a, np.ndarray) and a.shape == expected.shape else a for a in args]
        rows = list(zip(*[np.asarray(i).tolist() for i in inputs if isinstance(i, np.ndarray)]))
        raise AssertionError(f"{where}: {int(bad.sum())} values differ from PyTorch\n"
                             + "\n".join(f"  inputs {r} -> fxkit {x!r}, torch {y!r}"
                                         for r, x, y in zip(rows[:8], got[bad][:8].tolist(),
                                                            expected[bad][:8].tolist())))
