"""The mobile-network activations: ``relu6``, ``hardsigmoid``, ``hardswish``, ``mish``.

Formulas are PyTorch's CPU kernels, step for step, so float32 results round as
torch's do: ``relu6(x) = min(max(x, 0), 6)``, ``hardsigmoid(x) = min(max(x + 3, 0), 6) / 6``,
``hardswish(x) = x * min(max(x + 3, 0), 6) / 6`` and ``mish(x) = x * tanh(log1p(exp(x)))``.
relu6 keeps integer dtypes, as PyTorch's hardtanh does; the others promote
integers to float32 like ``gelu``. NaN propagates through all of them.
``inplace=True`` writes the result into the input, as ``F.relu6(x, inplace=True)``.
"""
from fxkit.errors import DTypeError
from fxkit.runtime.op import op
from fxkit.runtime.ops.elementwise_unary import _in_place_steps, _store_if_inplace
from fxkit.runtime.ops.scalar_bounds import maximum_of, minimum_of

# mish: tanh(log1p(exp(x))) is 1.0 in float64 once x > 20 (the error is 8e-18), so exp's
# argument is capped there: the same values without overflowing exp for large x.
_MISH_CAP = 20.0


@op("relu6", kind="elementwise", promote="common", method=False, template="minimum(maximum(a, 0), 6)")
def relu6(xp, input, inplace=False):  # noqa: A002
    """``min(max(input, 0), 6)`` (PyTorch's ``hardtanh(input, 0, 6)``); integer dtypes stay integer.

    Example:
        >>> F.relu6(fxkit.tensor([-1.0, 3.0, 8.0]))
        tensor([0., 3., 6.])
    """
    if input.dtype.kind == "b":
        raise DTypeError("relu6: bool inputs are not supported (PyTorch's hardtanh has no bool kernel); "
                         "cast with .float() or .int() first")
    if inplace:
        maximum_of(xp, input, 0, out=input)
        return minimum_of(xp, input, 6, out=input)
    out = maximum_of(xp, input, 0)
    return minimum_of(xp, out, 6, out=out) if out.ndim else xp.minimum(out, 6)


@op("hardsigmoid", kind="elementwise", promote="float", method=False,
    template="minimum(maximum(a + 3, 0), 6) / 6")
@_in_place_steps
def hardsigmoid(xp, input, inplace=False):  # noqa: A002
    """``relu6(input + 3) / 6``: 0 below -3, 1 above 3, linear between.

    Example:
        >>> F.hardsigmoid(fxkit.tensor([-4.0, 0.0, 4.0]))
        tensor([0.0000, 0.5000, 1.0000])
    """
    out = input + 3.0
    maximum_of(xp, out, 0.0, out=out)
    minimum_of(xp, out, 6.0, out=out)
    out /= 6.0
    return _store_if_inplace(input, out, inplace)


@op("hardswish", kind="elementwise", promote="float", method=False,
    template="a * minimum(maximum(a + 3, 0), 6) / 6")
@_in_place_steps
def hardswish(xp, input, inplace=False):  # noqa: A002
    """``input * relu6(input + 3) / 6`` (MobileNetV3's h-swish).

    Example:
        >>> F.hardswish(fxkit.tensor([-4.0, 1.0, 4.0]))
        tensor([-0.0000, 0.6667, 4.0000])
    """
    out = input + 3.0
    maximum_of(xp, out, 0.0, out=out)
    minimum_of(xp, out, 6.0, out=out)
    out *= input
    out /= 6.0
    return _store_if_inplace(input, out, inplace)


@op("mish", kind="elementwise", promote="float", method=False,
    template=f"a * tanh(log1p(exp(minimum(a, {_MISH_CAP!r}))))")
@_in_place_steps
def mish(xp, input, inplace=False):  # noqa: A002
    """``input * tanh(softplus(input))``, computed as PyTorch does: ``x * tanh(log1p(exp(x)))``.

    Example:
        >>> F.mish(fxkit.tensor([1.0]))
        tensor([0.8651])
    """
    out = minimum_of(xp, input, _MISH_CAP)
    xp.exp(out, out=out)
    xp.log1p(out, out=out)
    xp.tanh(out, out=out)
    out *= input
    return _store_if_inplace(input, out, inplace)
