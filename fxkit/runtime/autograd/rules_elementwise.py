"""Derivative rules of the elementwise ops and casts (PyTorch's formulas, derivatives.yaml).

Gradients are returned in the broadcast shape of the output; the engine sums
them to each input's shape (`conform`). Rounding ops (floor, ceil, round,
sign) and ``div`` with a rounding mode have zero gradients, as in PyTorch.
"""
import math

from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.registry import get_op

_where = get_op("where")
_zeros_like = get_op("zeros_like")
_erf = get_op("erf")
_SQRT1_2 = 0.7071067811865476
_TWO_OVER_SQRT_PI = 1.1283791670955126
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654


def _is_tensor(x):
    return hasattr(x, "shape")


@defgrad("add")
def _add(ctx, g, a, b, alpha=1):
    return g, (g if alpha == 1 else g * alpha)


@defgrad("sub")
def _sub(ctx, g, a, b, alpha=1):
    return g, (-g if alpha == 1 else g * -alpha)


@defgrad("mul", saves=("a", "b"))
def _mul(ctx, g, a, b):
    return (g * b if ctx.needs(a) else None), (g * a if ctx.needs(b) else None)


@defgrad("div", saves=("a", "b"))
def _div(ctx, g, a, b, rounding_mode=None):
    if rounding_mode is not None:
        zero = _zeros_like(g)
        return zero, zero
    ga = g / b
    return ga, (-ga * a / b if ctx.needs(b) else None)


@defgrad("remainder", saves=("a", "b"))
def _remainder(ctx, g, a, b):
    return g, (-g * a.div(b, rounding_mode="floor") if ctx.needs(b) else None)


@defgrad("pow", saves=("a", "b"), out=True)
def _pow(ctx, g, a, b):
    ga = gb = None
    if ctx.needs(a):
        if _is_tensor(b):
            ga = _where(b == 0, 0.0, g * b * a ** (b - 1))
        else:
            ga = _zeros_like(g) if b == 0 else g * b * a ** (b - 1)
    if ctx.needs(b):
        if _is_tensor(a):
            gb = _where((a == 0) & (b >= 0), 0.0, g * ctx.out * a.log())
        else:
            gb = g * 0.0 if a == 0 else g * ctx.out * math.log(a)
    return ga, gb


def _extremum_rule(name, wins):
    @defgrad(name, saves=("a", "b"))
    def rule(ctx, g, a, b):
        # NOTE: ties share the gradient equally, like PyTorch
        share = (a == b).to(g.dtype) * 0.5 + wins(a, b).to(g.dtype)
        return g * share, g - g * share

    return rule


_extremum_rule("maximum", lambda a, b: a > b)
_extremum_rule("minimum", lambda a, b: a < b)


@defgrad("where", saves=("condition",))
def _where_grad(ctx, g, condition, a, b):
    return (None, _where(condition, g, 0.0) if ctx.needs(a) else None,
            _where(condition, 0.0, g) if ctx.needs(b) else None)


@defgrad("lerp", saves=("a", "b", "weight"))
def _lerp(ctx, g, a, b, weight):
    return g * (1 - weight), g * weight, (g * (b - a) if ctx.needs(weight) else None)


@defgrad("neg")
def _neg(ctx, g, a):
    return -g


@defgrad("abs", saves=("a",))
def _abs(ctx, g, a):
    return g * a.sign()


@defgrad("exp", out=True)
def _exp(ctx, g, a):
    return g * ctx.out


@defgrad("log", saves=("a",))
def _log(ctx, g, a):
    return g / a


@defgrad("log1p", saves=("a",))
def _log1p(ctx, g, a):
    return g / (a + 1)


@defgrad("expm1", out=True)
def _expm1(ctx, g, a):
    return g * (ctx.out + 1)


@defgrad("sqrt", out=True)
def _sqrt(ctx, g, a):
    return g / (ctx.out * 2)


@defgrad("sin", saves=("a",))
def _sin(ctx, g, a):
    return g * a.cos()


@defgrad("cos", saves=("a",))
def _cos(ctx, g, a):
    return g * -a.sin()


@defgrad("tanh", out=True)
def _tanh(ctx, g, a):
    out = ctx.out
    return g * (1 - out * out)


@defgrad("erf", saves=("a",))
def _erf_grad(ctx, g, a):
    return g * (-(a * a)).exp() * _TWO_OVER_SQRT_PI


@defgrad("rsqrt", out=True)
def _rsqrt(ctx, g, a):
    out = ctx.out
    return g * (out * out * out) * -0.5


@defgrad("reciprocal", out=True)
def _reciprocal(ctx, g, a):
    out = ctx.out
    return -g * out * out


@defgrad("sigmoid", out=True)
def _sigmoid(ctx, g, a):
    out = ctx.out
    return g * out * (1 - out)


@defgrad("silu", saves=("a",), inplace_kw=True)
def _silu(ctx, g, a, inplace=False):
    s = a.sigmoid()
    return g * s * (a * (1 - s) + 1)


@defgrad("relu", out=True, inplace_kw=True)
def _relu(ctx, g, a, inplace=False):
    return _where(ctx.out > 0, g, 0.0)


@defgrad("leaky_relu", saves=("a",), inplace_kw=True)
def _leaky_relu(ctx, g, a, negative_slope=0.01, inplace=False):
    return _where(a > 0, g, g * negative_slope)


@defgrad("gelu", saves=("a",))
def _gelu(ctx, g, a, approximate="none"):
    if approximate == "tanh":
        inner = (a + a * a * a * 0.044715) * _SQRT_2_OVER_PI
        t = inner.tanh()
        slope = (1 - t * t) * (a * a * (3 * 0.044715) + 1) * _SQRT_2_OVER_PI
        return g * ((t + 1) * 0.5 + a * 0.5 * slope)
    cdf = (_erf(a * _SQRT1_2) + 1) * 0.5
    pdf = (a * a * -0.5).exp() * _INV_SQRT_2PI
    return g * (cdf + a * pdf)


@defgrad("relu6", saves=("input",), inplace_kw=True)
def _relu6(ctx, g, input, inplace=False):  # noqa: A002
    # NOTE: zero at both kinks, as PyTorch's hardtanh_backward (min < x < max)
    return _where((input > 0) & (input < 6), g, 0.0)


@defgrad("hardsigmoid", saves=("input",), inplace_kw=True)
def _hardsigmoid(ctx, g, input, inplace=False):  # noqa: A002
    return _where((input > -3) & (input < 3), g / 6, 0.0)


@defgrad("hardswish", saves=("input",), inplace_kw=True)
def _hardswish(ctx, g, input, inplace=False):  # noqa: A002
    # PyTorch's hardswish_backward: 0 below -3, g * (x / 3 + 1/2) up to 3, g above
    return _where(input < -3, 0.0, _where(input <= 3, g * (input / 3 + 0.5), g))


@defgrad("mish", saves=("input",), inplace_kw=True)
def _mish(ctx, g, input, inplace=False):  # noqa: A002
    # PyTorch's mish_backward: tanh(softplus(x)) + x * sigmoid(x) * (1 - tanh(softplus(x))**2)
    t = input.clamp(max=20.0).exp().log1p().tanh()
    return g * (t + input * input.sigmoid() * (1 - t * t))


def _zero_rule(name):
    @defgrad(name)
    def rule(ctx, g, a, *args, **kwargs):
        return _zeros_like(g)

    return rule


for _name in ("floor", "ceil", "round", "sign"):
    _zero_rule(_name)


@defgrad("clamp", saves=("a", "min", "max"))
def _clamp(ctx, g, a, min=None, max=None):  # noqa: A002
    if min is None:
        return _where(a <= max, g, 0.0), None, _where(a > max, g, 0.0) if ctx.needs(max) else None
    if max is None:
        return _where(a >= min, g, 0.0), _where(a < min, g, 0.0) if ctx.needs(min) else None
    ga = _where((a >= min) & (a <= max), g, 0.0)
    gmin = _where((a < min) & (min < max), g, 0.0) if ctx.needs(min) else None
    gmax = _where((a > max) | (max < min), g, 0.0) if ctx.needs(max) else None
    return ga, gmin, gmax


@defgrad("masked_fill", saves=("mask",))
def _masked_fill(ctx, g, a, mask, value):
    return g.masked_fill(mask, 0.0), None, (_where(mask, g, 0.0).sum() if ctx.needs(value) else None)


@defgrad("to")
def _to(ctx, g, a, *args, **kwargs):
    return g.to(a.device, a.dtype)


def _cast_rule(name):
    @defgrad(name)
    def rule(ctx, g, a):
        return g.to(a.dtype)

    return rule


for _name in ("float", "double", "half"):
    _cast_rule(_name)
