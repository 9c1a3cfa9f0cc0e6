"""Elementwise ops of one input: math functions, activations, rounding, clamp.

Dtypes follow PyTorch: math functions and activations turn integer and bool
tensors into float32 (``promote="float"``); ``neg``, ``abs``, ``relu``, ``sign``,
``floor``, ``ceil``, ``round`` and ``clamp`` keep integer dtypes; ``isnan``,
``isinf``, ``isfinite`` and ``logical_not`` give bool. Impls made of several steps update one fresh buffer
in place (``out = xp.negative(a); xp.exp(out, out=out)``) so an op allocates
once, like a fused kernel would. bfloat16 counts as floating point (numpy's
kind for it is ``'V'``) and runs those steps in float32, as half precision does.
"""
import functools
import inspect
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.dtypes import from_numpy
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops import intrinsics
from fxkit.runtime.ops.elementwise_binary import promoted_meta
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, scalar
from fxkit.runtime.ops.scalar_bounds import maximum_of, minimum_of

_SQRT1_2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


def _in_place_steps(impl):
    """Run ``impl`` on an input it may update buffers of in place.

    numpy returns scalars, not arrays, from ufuncs on 0-d arrays, and ``out=``
    cannot write into a scalar: a 0-d input runs as a 1-element array. Half
    precision runs in float32 and is rounded once at the end, as PyTorch
    computes it (and so ``exp`` of a float16 cannot overflow halfway).
    """

    first = list(inspect.signature(impl).parameters)[1]  # the input's name (``a``, ``input``)

    @functools.wraps(impl)
    def run(xp, *args, **kwargs):
        if args:
            a, args = args[0], args[1:]
        else:  # the input passed by name: ``F.hardswish(input=x)``
            a = kwargs.pop(first)
        try:
            direct = a.ndim and a.itemsize >= 4
        except AttributeError:
            raise DTypeError(f"{impl.__name__}: expected a tensor, got {type(a).__name__} {a!r}") from None
        if direct:
            return impl(xp, a, *args, **kwargs)
        wide = a.reshape(a.shape or (1,))
        if a.itemsize < 4:
            wide = wide.astype(np.float32)
        out = impl(xp, wide, *args, **kwargs).astype(a.dtype, copy=False).reshape(a.shape)
        if kwargs.get("inplace"):  # ``wide`` was a float32 copy of a half input
            a[...] = out
            return a
        return out

    return run


@op("neg", kind="elementwise", promote="common", template="-a")
def neg(xp, input):  # noqa: A002
    """``-a``."""
    try:
        return xp.negative(input)
    except TypeError:
        if input.dtype.kind != "b":
            raise
        raise DTypeError("neg: negation, the `-` operator, on a bool tensor is not supported; "
                         "use logical_not() or the `~` operator instead") from None


@op("abs", kind="elementwise", promote="common", template="abs(a)")
def abs(xp, input):  # noqa: A001, A002
    """``|a|``; integer dtypes stay integer."""
    return xp.abs(input)


def _math(name, doc):
    """A math function that is one ufunc of the same name in numpy and cupy."""

    def impl(xp, input):  # noqa: A002
        return getattr(xp, name)(input)

    impl.__name__ = name
    impl.__doc__ = f"{doc}; integer and bool tensors give float32."
    return op(name, kind="elementwise", promote="float", template=f"{name}(a)")(impl)


exp = _math("exp", "``e ** a``")
log = _math("log", "Natural logarithm")
log1p = _math("log1p", "``log(1 + a)``, accurate for small ``a``")
expm1 = _math("expm1", "``exp(a) - 1``, accurate for small ``a``")
sqrt = _math("sqrt", "Square root")
sin = _math("sin", "Sine")
cos = _math("cos", "Cosine")
tanh = _math("tanh", "Hyperbolic tangent")


@op("erf", kind="elementwise", promote="float", template="erf(a)")
def erf(xp, input):  # noqa: A002
    """The error function ``2/sqrt(pi) * integral(exp(-t**2), 0, a)``."""
    if not hasattr(input, "dtype"):  # a Python number, given no tensor
        return math.erf(input)
    return intrinsics.erf(xp, input)


@op("rsqrt", kind="elementwise", promote="float", template="1 / sqrt(a)")
@_in_place_steps
def rsqrt(xp, input):  # noqa: A002
    """``1 / sqrt(a)``."""
    out = xp.sqrt(input)
    xp.reciprocal(out, out=out)
    return out


@op("reciprocal", kind="elementwise", promote="float", template="1 / a")
def reciprocal(xp, input):  # noqa: A002
    """``1 / a``; integer and bool tensors give float32."""
    return xp.reciprocal(input)


@op("sigmoid", kind="elementwise", promote="float", template="1 / (1 + exp(-a))")
@_in_place_steps
def sigmoid(xp, input):  # noqa: A002
    """``1 / (1 + exp(-a))``, PyTorch's formula: ``exp(-a)`` overflows to inf for very negative
    ``a`` and the result is 0 (subnormal just before), as PyTorch's."""
    out = xp.negative(input)
    with np.errstate(over="ignore"):
        xp.exp(out, out=out)
    out += 1.0
    xp.reciprocal(out, out=out)
    return out


@op("silu", kind="elementwise", promote="float", template="a / (1 + exp(-a))")
@_in_place_steps
def silu(xp, input, inplace=False):  # noqa: A002
    """``a * sigmoid(a)``, computed as PyTorch does: ``a / (1 + exp(-a))``;
    ``inplace=True`` also writes the result into ``a``."""
    out = xp.negative(input)
    with np.errstate(over="ignore", invalid="ignore"):  # silu(-max) is -0 and silu(-inf) nan, as PyTorch's
        xp.exp(out, out=out)
        out += 1.0
        xp.divide(input, out, out=out)
    return _store_if_inplace(input, out, inplace)


@op("relu", kind="elementwise", promote="common", template="maximum(a, 0)")
def relu(xp, input, inplace=False):  # noqa: A002
    """``max(a, 0)``; NaN stays NaN, integer dtypes stay integer; ``inplace=True``
    writes into ``a`` like ``F.relu(x, inplace=True)``."""
    # NOTE: False, not 0: numpy would turn a bool tensor and the Python int 0 into int64.
    if inplace:
        return maximum_of(xp, input, False, out=input)
    return maximum_of(xp, input, False)


@op("leaky_relu", kind="elementwise", promote="float", template="where(a > 0, a, a * negative_slope)")
@_in_place_steps
def leaky_relu(xp, input, negative_slope=0.01, inplace=False):  # noqa: A002
    """``a`` where ``a > 0``, else ``a * negative_slope``; ``inplace=True`` also writes into ``a``."""
    out = input * negative_slope
    if 0.0 <= negative_slope <= 1.0:  # then the result is the larger of the two, in one pass
        xp.maximum(out, input, out=out)
        return _store_if_inplace(input, out, inplace)
    return _store_if_inplace(input, xp.where(input > 0, input, out), inplace)


def _store_if_inplace(a, out, inplace):
    """PyTorch's ``inplace=True``: the input's storage receives the result."""
    if not inplace:
        return out
    if a.dtype != out.dtype:
        raise DTypeError(f"inplace=True needs a floating-point input, got {a.dtype}; drop inplace=True")
    a[...] = out
    return a


def _gelu_template(approximate="none"):
    if approximate == "tanh":
        return f"0.5 * a * (1 + tanh({_SQRT_2_OVER_PI!r} * (a + 0.044715 * a * a * a)))"
    return f"0.5 * a * (1 + erf(a * {_SQRT1_2!r}))"


@op("gelu", kind="elementwise", promote="float", template=_gelu_template)
@_in_place_steps
def gelu(xp, input, approximate="none"):  # noqa: A002
    """Gaussian error linear unit ``a * Phi(a)``.

    Args:
        approximate: ``'none'`` for the exact ``0.5 * a * (1 + erf(a / sqrt(2)))``,
            ``'tanh'`` for ``0.5 * a * (1 + tanh(sqrt(2 / pi) * (a + 0.044715 * a**3)))``.
    """
    if approximate not in ("none", "tanh"):
        raise ShapeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    with np.errstate(over="ignore"):  # a**3 of a large a is inf on purpose: tanh(inf) is 1
        if approximate == "none":
            out = intrinsics.erf(xp, input * _SQRT1_2)
        else:
            out = input * input
            out *= 0.044715
            out += 1.0
            out *= input
            out *= _SQRT_2_OVER_PI
            xp.tanh(out, out=out)
    out += 1.0
    out *= 0.5  # NOTE: before the product: ``a * (1 + ...)`` overflows for a near the dtype's max, a * 0.5 * 2 does not
    out *= input
    return out


def _keep_integers(name, a):
    """``floor``/``ceil``/``round`` of an integer tensor: a copy, as in PyTorch."""
    if a.dtype.kind == "b":
        raise DTypeError(f"{name}: not supported for bool tensors; cast with .int() or .float() first")
    return a.copy()


@op("floor", kind="elementwise", promote="common", template="floor(a)")
def floor(xp, input):  # noqa: A002
    """Round toward -inf; integer tensors are returned unchanged (copied)."""
    kind = input.dtype.kind
    return xp.floor(input) if kind == "f" or kind == BFLOAT16_KIND else _keep_integers("floor", input)


@op("ceil", kind="elementwise", promote="common", template="ceil(a)")
def ceil(xp, input):  # noqa: A002
    """Round toward +inf; integer tensors are returned unchanged (copied)."""
    kind = input.dtype.kind
    return xp.ceil(input) if kind == "f" or kind == BFLOAT16_KIND else _keep_integers("ceil", input)


def _round_template(decimals=0):
    if decimals == 0:
        return "rint(a)"
    scale = 10.0 ** decimals if decimals > 0 else 10.0 ** -decimals
    return f"rint(a * {scale!r}) / {scale!r}" if decimals > 0 else f"rint(a / {scale!r}) * {scale!r}"


@op("round", kind="elementwise", promote="common", template=_round_template)
def round(xp, input, decimals=0):  # noqa: A001, A002
    """Round half to even (``round(2.5) == 2``), to ``decimals`` decimal places.

    Like PyTorch, ``decimals != 0`` scales by ``10 ** decimals``, rounds and
    scales back, so the result is the float nearest to that, not an exact decimal.
    """
    kind = input.dtype.kind
    if kind != "f" and kind != BFLOAT16_KIND:
        if decimals != 0:
            raise DTypeError(f"round: decimals={decimals} needs a floating-point tensor, got {input.dtype}")
        return _keep_integers("round", input)
    if decimals == 0:
        return xp.rint(input)
    return _round_decimals(xp, input, decimals)


@_in_place_steps
def _round_decimals(xp, a, decimals):
    if decimals > 0:
        scale = 10.0 ** decimals
        out = a * scale
        xp.rint(out, out=out)
        out /= scale
    else:
        scale = 10.0 ** -decimals
        out = a / scale
        xp.rint(out, out=out)
        out *= scale
    return out


@op("sign", kind="elementwise", promote="common", template="where(a > 0, 1, where(a < 0, -1, 0))")
def sign(xp, input):  # noqa: A002
    """-1, 0 or 1 by the sign of ``a``; NaN gives 0, as PyTorch's CPU kernel does."""
    if input.dtype.kind == "b":
        return input.copy()
    return xp.subtract(input > 0, input < 0, dtype=input.dtype)


def _clamp_template(min=None, max=None):  # noqa: A002
    if min is None:
        return "minimum(a, max)"
    return "maximum(a, min)" if max is None else "minimum(maximum(a, min), max)"


def _clamp_rule(input, min=None, max=None):  # noqa: A002
    bounds = [v for v in (min, max) if v is not None]
    if not bounds:
        raise _no_bounds()
    return promoted_meta("clamp", input, *bounds)


# numpy's clip loop is several times faster than maximum + minimum on large arrays, slower on small ones
# (and it has no bfloat16 loop: it would return float32).
_CLIP_SIZE = 1024


def _no_bounds():
    return ShapeError("clamp: at least one of min and max must be given (not None)")


def _needs_cast(a, bound):
    """Whether ``clamp(a, bound)`` has a result dtype other than ``a``'s."""
    kind = type(bound)
    if bound is None or kind is bool:
        return False
    if kind is int:
        return a.dtype.kind == "b"
    if kind is float:
        return a.dtype.kind != "f"  # bfloat16 too: its bounds become bfloat16 arrays
    return getattr(bound, "dtype", None) != a.dtype


@op("clamp", kind="elementwise", promote="common", template=_clamp_template, shape_rule=_clamp_rule)
def clamp(xp, input, min=None, max=None):  # noqa: A002
    """Limit ``a`` to ``[min, max]``: ``minimum(maximum(a, min), max)``.

    ``min`` and ``max`` are numbers or tensors (broadcast against ``a``) and take
    part in dtype promotion as in PyTorch (an int tensor clamped by 0.5 is float32).
    When ``min > max`` every element becomes ``max``; NaN stays NaN.
    """
    if min is None and max is None:
        raise _no_bounds()
    if _needs_cast(input, min) or _needs_cast(input, max):
        input, min, max = _cast_to_result(input, min, max)
    if min is not None and max is not None and input.size >= _CLIP_SIZE and input.dtype.kind != BFLOAT16_KIND:
        return xp.clip(input, min, max)
    if min is None:
        return minimum_of(xp, input, max)  # a tensor bound goes to numpy's call as it is
    out = maximum_of(xp, input, min)
    if max is None:
        return out
    if out.ndim and not hasattr(max, "shape"):  # a number: update the buffer in place
        return minimum_of(xp, out, max, out=out)
    return xp.minimum(out, max)


def _cast_to_result(*values):
    """``values`` (arrays, numbers and Nones) cast to their PyTorch result dtype."""
    metas = [TensorMeta(v.shape, from_numpy(v.dtype)) if hasattr(v, "dtype") else v for v in values if v is not None]
    target = promoted_meta("clamp", *metas).dtype.np
    return [v.astype(target) if hasattr(v, "dtype") and v.dtype != target else scalar(v, target) for v in values]


@op("logical_not", kind="elementwise", promote="bool", template="logical_not(a)")
def logical_not(xp, input):  # noqa: A002
    """``not a`` elementwise, as a bool tensor (nonzero is true)."""
    return xp.logical_not(input)


@op("isnan", kind="elementwise", promote="compare", template="isnan(a)")
def isnan(xp, input):  # noqa: A002
    """Where ``a`` is NaN, as a bool tensor (all false for integer tensors)."""
    return xp.isnan(input)


@op("isinf", kind="elementwise", promote="compare", template="isinf(a)")
def isinf(xp, input):  # noqa: A002
    """Where ``a`` is +inf or -inf, as a bool tensor (all false for integer tensors)."""
    return xp.isinf(input)


@op("isfinite", kind="elementwise", promote="compare", template="isfinite(a)")
def isfinite(xp, input):  # noqa: A002
    """Where ``a`` is neither NaN nor infinite, as a bool tensor (all true for integer tensors)."""
    return xp.isfinite(input)


@op("bitwise_not", kind="elementwise", promote="integer", template="~a")
def bitwise_not(xp, input):  # noqa: A002
    """``~a``: logical not for bool tensors, two's complement for integers."""
    return xp.invert(input)
