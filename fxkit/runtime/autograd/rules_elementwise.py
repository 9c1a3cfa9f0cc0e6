"""Derivative rules of the elementwise ops and casts (PyTorch's formulas, derivatives.yaml).

Gradients are returned in the broadcast shape of the output; the engine sums
them to each input's shape (`conform`). Rounding ops (floor, ceil, round,
sign) and ``div`` with a rounding mode have zero gradients, as in PyTorch.
"""
import math

from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.registry import get_op

_where = get_op("where")
_threshold_backward = get_op("threshold_backward")
_zeros_like = get_op("zeros_like")
_erf = get_op("erf")
_SQRT1_2 = 0.7071067811865476
_TWO_OVER_SQRT_PI = 1.1283791670955126
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654


def _is_tensor(x):
    return hasattr(x, "shape")


@defgrad("add")
def _add(ctx, g, input, other, alpha=1):  # noqa: A002
    return g, (g if alpha == 1 else g * alpha)


@defgrad("sub")
def _sub(ctx, g, input, other, alpha=1):  # noqa: A002
    return g, (-g if alpha == 1 else g * -alpha)


@defgrad("mul", saves=("input", "other"))
def _mul(ctx, g, input, other):  # noqa: A002
    return (g * other if ctx.needs(input) else None), (g * input if ctx.needs(other) else None)


@defgrad("div", saves=("input", "other"))
def _div(ctx, g, input, other, rounding_mode=None):  # noqa: A002
    if rounding_mode is not None:
        zero = _zeros_like(g)
        return zero, zero
    ga = g / other
    return ga, (-ga * input / other if ctx.needs(other) else None)


@defgrad("remainder", saves=("input", "other"))
def _remainder(ctx, g, input, other):  # noqa: A002
    return g, (-g * input.div(other, rounding_mode="floor") if ctx.needs(other) else None)


@defgrad("pow", saves=("input", "exponent"), out=True)
def _pow(ctx, g, input, exponent):  # noqa: A002
    ga = gb = None
    if ctx.needs(input):
        if _is_tensor(exponent):
            ga = _where(exponent == 0, 0.0, g * exponent * input ** (exponent - 1))
        else:
            ga = _zeros_like(g) if exponent == 0 else g * exponent * input ** (exponent - 1)
    if ctx.needs(exponent):
        if _is_tensor(input):
            gb = _where((input == 0) & (exponent >= 0), 0.0, g * ctx.out * input.log())
        else:
            gb = g * 0.0 if input == 0 else g * ctx.out * math.log(input)
    return ga, gb


def _extremum_rule(name, wins):
    @defgrad(name, saves=("input", "other"))
    def rule(ctx, g, input, other):  # noqa: A002
        # NOTE: ties share the gradient equally, like PyTorch
        share = (input == other).to(g.dtype) * 0.5 + wins(input, other).to(g.dtype)
        return g * share, g - g * share

    return rule


_extremum_rule("maximum", lambda a, b: a > b)
_extremum_rule("minimum", lambda a, b: a < b)


@defgrad("where", saves=("condition",))
def _where_grad(ctx, g, condition, input, other):  # noqa: A002
    return (None, _where(condition, g, 0.0) if ctx.needs(input) else None,
            _where(condition, 0.0, g) if ctx.needs(other) else None)


@defgrad("lerp", saves=("input", "end", "weight"))
def _lerp(ctx, g, input, end, weight):  # noqa: A002
    return g * (1 - weight), g * weight, (g * (end - input) if ctx.needs(weight) else None)


@defgrad("neg")
def _neg(ctx, g, input):  # noqa: A002
    return -g


@defgrad("abs", saves=("input",))
def _abs(ctx, g, input):  # noqa: A002
    return g * input.sign()


@defgrad("exp", out=True)
def _exp(ctx, g, input):  # noqa: A002
    return g * ctx.out


@defgrad("log", saves=("input",))
def _log(ctx, g, input):  # noqa: A002
    return g / input


@defgrad("log1p", saves=("input",))
def _log1p(ctx, g, input):  # noqa: A002
    return g / (input + 1)


@defgrad("expm1", out=True)
def _expm1(ctx, g, input):  # noqa: A002
    return g * (ctx.out + 1)


@defgrad("sqrt", out=True)
def _sqrt(ctx, g, input):  # noqa: A002
    return g / (ctx.out * 2)


@defgrad("sin", saves=("input",))
def _sin(ctx, g, input):  # noqa: A002
    return g * input.cos()


@defgrad("cos", saves=("input",))
def _cos(ctx, g, input):  # noqa: A002
    return g * -input.sin()


@defgrad("tanh", out=True)
def _tanh(ctx, g, input):  # noqa: A002
    out = ctx.out
    return g * (1 - out * out)


@defgrad("erf", saves=("input",))
def _erf_grad(ctx, g, input):  # noqa: A002
    return g * (-(input * input)).exp() * _TWO_OVER_SQRT_PI


@defgrad("rsqrt", out=True)
def _rsqrt(ctx, g, input):  # noqa: A002
    out = ctx.out
    return g * (out * out * out) * -0.5


@defgrad("reciprocal", out=True)
def _reciprocal(ctx, g, input):  # noqa: A002
    out = ctx.out
    return -g * out * out


@defgrad("sigmoid", out=True)
def _sigmoid(ctx, g, input):  # noqa: A002
    out = ctx.out
    return g * out * (1 - out)


@defgrad("silu", saves=("input",), inplace_kw=True)
def _silu(ctx, g, input, inplace=False):  # noqa: A002
    s = input.sigmoid()
    return g * s * (input * (1 - s) + 1)


@defgrad("relu", out=True, inplace_kw=True)
def _relu(ctx, g, input, inplace=False):  # noqa: A002
    return _threshold_backward(g, ctx.out, 0)


@defgrad("leaky_relu", saves=("input",), inplace_kw=True)
def _leaky_relu(ctx, g, input, negative_slope=0.01, inplace=False):  # noqa: A002
    return _where(input > 0, g, g * negative_slope)


@defgrad("gelu", saves=("input",))
def _gelu(ctx, g, input, approximate="none"):  # noqa: A002
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * _SQRT_2_OVER_PI
        t = inner.tanh()
        slope = (1 - t * t) * (input * input * (3 * 0.044715) + 1) * _SQRT_2_OVER_PI
        return g * ((t + 1) * 0.5 + input * 0.5 * slope)
    cdf = (_erf(input * _SQRT1_2) + 1) * 0.5
    pdf = (input * input * -0.5).exp() * _INV_SQRT_2PI
    return g * (cdf + input * pdf)


@defgrad("relu6", saves=("input",), inplace_kw=True)
def _relu6(ctx, g, input, inplace=False):  # noqa: A002
    # NOTE: zero at both kinks and beyond, as PyTorch's hardtanh_backward (x <= min or x >= max); NaN passes g on
    return _where((input <= 0) | (input >= 6), 0.0, g)


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
    def rule(ctx, g, input, *args, **kwargs):  # noqa: A002
        return _zeros_like(g)

    return rule


for _name in ("floor", "ceil", "round", "sign"):
    _zero_rule(_name)


@defgrad("clamp", saves=("input", "min", "max"))
def _clamp(ctx, g, input, min=None, max=None):  # noqa: A002
    if min is None:
        return _where(input <= max, g, 0.0), None, _where(input > max, g, 0.0) if ctx.needs(max) else None
    if max is None:
        return _where(input >= min, g, 0.0), _where(input < min, g, 0.0) if ctx.needs(min) else None
    ga = _where((input >= min) & (input <= max), g, 0.0)
    gmin = _where((input < min) & (min < max), g, 0.0) if ctx.needs(min) else None
    gmax = _where((input > max) | (max < min), g, 0.0) if ctx.needs(max) else None
    return ga, gmin, gmax


@defgrad("masked_fill", saves=("mask",))
def _masked_fill(ctx, g, input, mask, value):  # noqa: A002
    return g.masked_fill(mask, 0.0), None, (_where(mask, g, 0.0).sum() if ctx.needs(value) else None)


@defgrad("to")
def _to(ctx, g, input, *args, **kwargs):  # noqa: A002
    return g.to(input.device, input.dtype)


def _cast_rule(name):
    @defgrad(name)
    def rule(ctx, g, input):  # noqa: A002
        return g.to(input.dtype)

    return rule


for _name in ("float", "double", "half"):
    _cast_rule(_name)
