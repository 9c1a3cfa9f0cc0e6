"""Scalar math for generated numba kernels, written so that loops over it vectorise.

numba calls libm for ``math.exp`` and ``math.erf``; without Intel's SVML
(not installed here) LLVM cannot vectorise a loop that calls them, and a
softmax spends its time in scalar ``expf``. The float32 functions here are
branch-free polynomials with an exact power-of-two scaling (Cephes' ``expf``
and ``tanhf``, and the rational ``erf`` that fxkit's eager ``erf`` evaluates),
so the loop vectoriser turns them into SIMD code. Accuracy: ``exp32`` and
``tanh32`` within 2 ulp of the correctly rounded result, ``erf32`` the eager
formula itself; NaN and infinities behave as numpy's. ``exp32``'s polynomial
is multiply-adds LLVM fuses where the CPU has FMA: the exponential is most of
a softmax's time, and fused it takes half the instructions.

`maximum` and `minimum` propagate NaN from either side like numpy's (Python's
``max`` does not).

Generated kernel modules import these. They are not cached on disk
themselves: numba links a cached function as object code, which LLVM cannot
inline, and a call per element stops vectorisation. The kernels calling
them are cached, with these inlined. Only the row sums reassociate (fastmath on
loops that call nothing, or the one add of `accumulate`), so no fastmath flag
reaches the range reductions here.
"""
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from fxkit.runtime.ops.intrinsics import _ERF_P, _ERF_Q

_JIT = {"error_model": "numpy", "nogil": True}
_F32 = np.float32
_LOG2E = _F32(1.4426950408889634)
_LN2_HI = _F32(0.693359375)  # Cody and Waite: ln 2 = hi + lo, hi with few bits so k * hi is exact
_LN2_LO = _F32(-2.12194440e-4)
_TWO_TO_MINUS_64 = _F32(2.0 ** -64)
_EXP_P = tuple(_F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1))
_TANH_P = tuple(_F32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                                   -3.33332819422e-1))
_ERF_P64 = tuple(np.float64(c) for c in _ERF_P)
_ERF_Q64 = tuple(np.float64(c) for c in _ERF_Q)


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 ``bits`` (a register move, vectorisable)."""
    signature = types.float32(types.int32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return signature, codegen


@intrinsic
def _fmuladd(typingctx, a, b, c):
    """``a * b + c`` as ``llvm.fmuladd``: one fused multiply-add where the CPU has them (half the
    instructions of a polynomial, and one rounding instead of two), a multiply and an add elsewhere."""
    signature = a(a, b, c)

    def codegen(context, builder, sig, args):
        kind = args[0].type
        function = builder.module.declare_intrinsic("llvm.fmuladd", [kind], ir.FunctionType(kind, [kind] * 3))
        return builder.call(function, args)

    return signature, codegen


@numba.njit(**_JIT)
def _exp_reduced(x):
    """``exp(x) = 2**k * p`` for a float32 ``x`` in [-104, 89] (not NaN): ``(p, k)``, ``p = exp(r)``
    with ``x = k ln 2 + r``, ``|r| <= ln 2 / 2``."""
    k = np.floor(_fmuladd(x, _LOG2E, _F32(0.5)))
    r = _fmuladd(k, -_LN2_HI, x)  # exact: k * hi has few bits
    r = _fmuladd(k, -_LN2_LO, r)
    p = _EXP_P[0]
    p = _fmuladd(p, r, _EXP_P[1])
    p = _fmuladd(p, r, _EXP_P[2])
    p = _fmuladd(p, r, _EXP_P[3])
    p = _fmuladd(p, r, _EXP_P[4])
    p = _fmuladd(p, r, _EXP_P[5])
    return _fmuladd(p * r, r, r) + _F32(1.0), np.int32(k)


@numba.njit(**_JIT)
def _power_of_two(k):
    """``2**k`` for an int32 ``k`` in [-126, 127]: the exponent bits alone."""
    return _float32_from_bits((k + np.int32(127)) << np.int32(23))


@numba.njit(**_JIT)
def exp32(x):
    """``exp`` of a float32."""
    x = _F32(x)
    # NOTE: clamped so 2**k stays within two float32 factors; NaN is replaced now and restored last.
    xc = x if x < _F32(89.0) else _F32(89.0)
    xc = xc if xc > _F32(-104.0) else _F32(-104.0)
    xc = xc if x == x else _F32(0.0)
    p, k = _exp_reduced(xc)
    # 2**k as two factors: results down to the smallest subnormal and up to overflow stay exact.
    half = k >> np.int32(1)
    scaled = p * _power_of_two(half) * _power_of_two(k - half)
    return scaled if x == x else x


@numba.njit(**_JIT)
def exp_nonpositive32(x):
    """``exp32`` of an ``x <= 0`` or NaN (softmax's ``x - max``), the same results in fewer instructions.

    The exponential is most of a softmax's arithmetic. Here ``k <= 0``, so
    one clamp does and ``2**k`` is ``2**(k + 64) * 2**-64``, the second factor
    a constant (one rounding, the last multiply, as in `exp32`).
    """
    x = _F32(x)
    xc = x if x > _F32(-104.0) else _F32(-104.0)  # NaN too: replaced now, restored last
    p, k = _exp_reduced(xc)
    scaled = p * _power_of_two(k + np.int32(64)) * _TWO_TO_MINUS_64
    return scaled if x == x else x


@numba.njit(**_JIT)
def tanh32(x):
    """``tanh`` of a float32: an odd polynomial below 0.625, ``1 - 2 / (exp(2|x|) + 1)`` above."""
    x = _F32(x)
    z = x * x
    p = _TANH_P[0]
    p = p * z + _TANH_P[1]
    p = p * z + _TANH_P[2]
    p = p * z + _TANH_P[3]
    p = p * z + _TANH_P[4]
    small = p * z * x + x
    ax = abs(x)
    large = _F32(1.0) - _F32(2.0) / (exp32(ax + ax) + _F32(1.0))
    large = large if x >= _F32(0.0) else -large
    # NOTE: x itself at ±0: the polynomial's term is +0 there and would turn tanh(-0.0) into +0.
    return (small if x != _F32(0.0) else x) if ax < _F32(0.625) else (large if x == x else x)


@numba.njit(**_JIT)
def erf32(x):
    """``erf`` of a float32, computed as eager ``erf`` does: ``x P(x²) / Q(x²)`` in float64, |x| <= 4."""
    w = np.float64(x)
    w = w if w < 4.0 else 4.0
    w = w if w > -4.0 else -4.0
    w = w if x == x else np.float64(x)
    t = w * w
    p = _ERF_P64[6]
    p = p * t + _ERF_P64[5]
    p = p * t + _ERF_P64[4]
    p = p * t + _ERF_P64[3]
    p = p * t + _ERF_P64[2]
    p = p * t + _ERF_P64[1]
    p = p * t + _ERF_P64[0]
    q = _ERF_Q64[5]
    q = q * t + _ERF_Q64[4]
    q = q * t + _ERF_Q64[3]
    q = q * t + _ERF_Q64[2]
    q = q * t + _ERF_Q64[1]
    q = q * t + _ERF_Q64[0]
    return _F32(w * p / q)


@numba.njit(**_JIT)
def maximum(a, b):
    """numpy's ``maximum`` of two scalars: NaN if either is NaN."""
    return b if (a < b) | (b != b) else a


@numba.njit(**_JIT)
def minimum(a, b):
    """numpy's ``minimum`` of two scalars: NaN if either is NaN."""
    return b if (a > b) | (b != b) else a


# -- row reductions ---------------------------------------------------------------------------
# Row kernels (softmax, log_softmax, layer_norm) keep each row in a scratch buffer and reduce it
# here. The maximum is LLVM's ``maxnum``, which skips NaN and is vectorised as a reduction
# (numba's ``max``, a compare and a select, is not); a NaN in a row still makes the row's sum NaN,
# so every output of that row is NaN as in eager mode. The sums are the only loops allowed to
# reassociate (the partial sums of a SIMD reduction), and they call nothing: numba applies a
# function's fastmath flags to the functions inlined into it, so ``exp32`` stays out of them.
@intrinsic
def maxnum(typingctx, a, b):
    """``llvm.maxnum``: the larger of two floats of one type, the other one where one is NaN."""
    signature = a(a, b)

    def codegen(context, builder, sig, args):
        kind = args[0].type
        function = builder.module.declare_intrinsic("llvm.maxnum", [kind], ir.FunctionType(kind, [kind, kind]))
        return builder.call(function, args)

    return signature, codegen


@intrinsic
def accumulate(typingctx, total, value):
    """``total + value``, an add LLVM may reassociate: a sum in a loop doing other work (softmax's
    exponentials) vectorises into SIMD partial sums, with no fastmath flag reaching that work."""
    if total != value:
        return None  # NOTE: numba then reports no matching signature (one float type, as LLVM's fadd)
    signature = total(total, value)

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return signature, codegen


@numba.njit(nogil=True)
def row_max(buf):
    """The largest value of a row, NaN skipped (``-inf`` for an empty row).

    A loop of its own: LLVM vectorises a max reduction, but not one sharing a
    loop with the stores that fill the row.
    """
    m = buf.dtype.type(-np.inf)
    for j in range(buf.size):
        m = maxnum(m, buf[j])
    return m


@numba.njit(nogil=True, fastmath={"reassoc"})
def row_sum(buf):
    """The sum of a row, in its dtype."""
    s = buf.dtype.type(0)
    for j in range(buf.size):
        s += buf[j]
    return s


@numba.njit(nogil=True, fastmath={"reassoc"})
def row_sum_squares(buf, mean):
    """``sum((buf - mean) ** 2)``: the variance's numerator, from the centred values."""
    s = buf.dtype.type(0)
    for j in range(buf.size):
        d = buf[j] - mean
        s += d * d
    return s
