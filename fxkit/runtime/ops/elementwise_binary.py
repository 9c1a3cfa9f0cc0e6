"""Elementwise ops of two or three inputs, broadcasting like PyTorch.

Inputs arrive already cast to the op's PyTorch result dtype (see ``Op`` in
``fxkit/runtime/op.py``); Python numbers stay Python numbers, which numpy
treats as weak, so ``float32_array * 2.5`` stays float32. bfloat16 has no weak
scalars in numpy and rounds after every step, so ``alpha`` and lerp compute it in
float32 and round once, as PyTorch does (`low_precision.run_in_float32`).
"""
from fxkit.errors import DTypeError, ShapeError, ValueRangeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import op
from fxkit.runtime.ops.bit_select import bit_select
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, rounded, run_in_float32, widen


def promoted_meta(name, *values):
    """Broadcast shape and PyTorch result dtype of elementwise inputs.

    Args:
        name: the op, for the broadcasting error.
        *values: `TensorMeta` for tensors, Python numbers, or None (ignored).
    """
    metas = [v for v in values if isinstance(v, TensorMeta)]
    shape = broadcast_shapes(*(m.shape for m in metas), op_name=name)
    dims = [m.dtype for m in metas if len(m.shape)]
    zeros = [m.dtype for m in metas if not len(m.shape)]
    scalars = [v for v in values if v is not None and not isinstance(v, TensorMeta)]
    return TensorMeta(shape, _dt.result_type(dims, zeros, scalars), metas[0].device)


def _kind(a, b):
    """The dtype kind (``'f'``, ``'i'``, ``'u'``, ``'b'``; ``'f'`` for bfloat16) of promoted
    inputs, or None for two numbers."""
    k = a.dtype.kind if hasattr(a, "dtype") else (b.dtype.kind if hasattr(b, "dtype") else None)
    return "f" if k == BFLOAT16_KIND else k


def _with_scaled(ufunc, name, a, b, alpha):
    """``ufunc(a, b * alpha)`` under PyTorch's rules for ``alpha`` (``add``/``sub``).

    For bfloat16, PyTorch rounds ``alpha`` to bfloat16 and computes in float32, rounding once.
    """
    dtype = a.dtype if hasattr(a, "dtype") else getattr(b, "dtype", None)
    kind = None if dtype is None else dtype.kind
    if kind == BFLOAT16_KIND:
        return ufunc(widen(a), widen(b) * rounded(alpha, dtype)).astype(dtype)
    if kind == "b":
        return ufunc(a, b if alpha else False)
    if type(alpha) is float and kind not in ("f", None):
        raise DTypeError(f"{name}: alpha={alpha} is a float, but the inputs are integer tensors; "
                         f"pass an integer alpha or cast the inputs with .float()")
    return ufunc(a, b * alpha)


@op("add", kind="elementwise", promote="common", template="a + b * alpha")
def add(xp, input, other, alpha=1):  # noqa: A002
    """``a + alpha * b``; for bool tensors, logical or."""
    return xp.add(input, other) if alpha == 1 else _with_scaled(xp.add, "add", input, other, alpha)


@op("sub", kind="elementwise", promote="common", template="a - b * alpha")
def sub(xp, input, other, alpha=1):  # noqa: A002
    """``a - alpha * b``."""
    try:
        return xp.subtract(input, other) if alpha == 1 else _with_scaled(xp.subtract, "sub", input, other, alpha)
    except TypeError:
        if _kind(input, other) != "b":
            raise
        raise DTypeError("sub: subtraction, the `-` operator, with two bool tensors is not supported; "
                         "use logical_xor() or the `^` operator instead") from None


@op("mul", kind="elementwise", promote="common", template="a * b")
def mul(xp, input, other):  # noqa: A002
    """``a * b``; for bool tensors, logical and."""
    return xp.multiply(input, other)


def _div_template(rounding_mode=None):
    if rounding_mode == "floor":
        return "floor_divide(a, b)"
    return "trunc(a / b)" if rounding_mode == "trunc" else "a / b"


def _div_rule(input, other, rounding_mode=None):  # noqa: A002
    meta = promoted_meta("div", input, other)
    if rounding_mode is None:
        return meta if meta.dtype.is_floating_point else meta._replace(dtype=_dt.default_float)
    _check_rounding(rounding_mode, meta.dtype.category == 0)
    return meta


def _check_rounding(rounding_mode, is_bool):
    if rounding_mode not in ("trunc", "floor"):
        raise ShapeError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    if is_bool:
        raise _bool_error(f"div(rounding_mode={rounding_mode!r})")


def _bool_error(name):
    return DTypeError(f"{name}: not supported for bool tensors; cast them with .int() or .float() first")


def _check_int_divisor(xp, name, b):
    """numpy answers an integer division by zero with 0 and a warning; PyTorch raises."""
    if not xp.all(b):
        raise ValueRangeError(f"{name}: integer division by zero; cast to float for inf/nan results")


def _check_division(xp, name, a, b):
    """``floor_divide`` and ``remainder`` refuse bools and integer division by zero."""
    kind = _kind(a, b)
    if kind == "b":
        raise _bool_error(name)
    if kind in ("i", "u"):
        _check_int_divisor(xp, name, b)


@op("div", kind="elementwise", promote="common", template=_div_template, shape_rule=_div_rule,
    integer_checks=True)
def div(xp, input, other, rounding_mode=None):  # noqa: A002
    """``a / b``.

    Args:
        rounding_mode: None for true division (integer and bool inputs give
            float32); ``'trunc'`` rounds toward zero and ``'floor'`` toward -inf,
            and both keep integer dtypes, as in PyTorch.
    """
    kind = _kind(input, other)
    if rounding_mode is None:
        if kind == "f" or kind is None:
            return xp.true_divide(input, other)
        return xp.true_divide(input, other, dtype=_dt.default_float.np)
    _check_rounding(rounding_mode, kind == "b")
    if kind in ("i", "u"):
        _check_int_divisor(xp, "div", other)
    if rounding_mode == "floor":
        return xp.floor_divide(input, other)
    if kind == "f" or kind is None:
        out = xp.true_divide(input, other)
        return xp.trunc(out, out=out) if out.ndim else xp.trunc(out)
    # Integer division rounding toward zero, exact for every int64: a - fmod(a, b) is a multiple of b.
    out = xp.subtract(input, xp.fmod(input, other))
    out //= other
    return out


@op("floor_divide", kind="elementwise", promote="common", template="floor_divide(a, b)", integer_checks=True)
def floor_divide(xp, input, other):  # noqa: A002
    """``a // b``, rounded toward -inf (``div(a, b, rounding_mode='floor')``)."""
    _check_division(xp, "floor_divide", input, other)
    return xp.floor_divide(input, other)


@op("remainder", kind="elementwise", promote="common", template="remainder(a, b)", integer_checks=True)
def remainder(xp, input, other):  # noqa: A002
    """Python's modulus ``a - floor(a / b) * b``: the result has the sign of ``b``."""
    _check_division(xp, "remainder", input, other)
    return xp.remainder(input, other)


@op("pow", kind="elementwise", promote="common", template="pow(a, b)", integer_checks=True)
def pow(xp, input, exponent):  # noqa: A001, A002
    """``a ** b``."""
    kind = _kind(input, exponent)
    if kind == "b":
        raise _bool_error("pow")
    try:
        return xp.power(input, exponent)
    except ValueError:
        if kind not in ("i", "u"):
            raise
        raise DTypeError("pow: integers to negative integer powers are not allowed; "
                         "cast the base to float first, e.g. x.float() ** -1") from None


@op("maximum", kind="elementwise", promote="common", template="maximum(a, b)")
def maximum(xp, input, other):  # noqa: A002
    """Elementwise maximum; NaN propagates."""
    return xp.maximum(input, other)


@op("minimum", kind="elementwise", promote="common", template="minimum(a, b)")
def minimum(xp, input, other):  # noqa: A002
    """Elementwise minimum; NaN propagates."""
    return xp.minimum(input, other)


def _comparison(name, ufunc, symbol):
    def impl(xp, input, other):  # noqa: A002
        return getattr(xp, ufunc)(input, other)

    impl.__name__ = name
    impl.__doc__ = f"``a {symbol} b`` as a bool tensor, compared in the inputs' result dtype."
    return op(name, kind="elementwise", promote="compare", template=f"a {symbol} b")(impl)


eq = _comparison("eq", "equal", "==")
ne = _comparison("ne", "not_equal", "!=")
lt = _comparison("lt", "less", "<")
le = _comparison("le", "less_equal", "<=")
gt = _comparison("gt", "greater", ">")
ge = _comparison("ge", "greater_equal", ">=")


def _logical(name):
    def impl(xp, input, other):  # noqa: A002
        return getattr(xp, name)(input, other)

    impl.__name__ = name
    impl.__doc__ = f"``{name}`` of the truth values of ``a`` and ``b`` (nonzero is true), as a bool tensor."
    return op(name, kind="elementwise", promote="bool", template=f"{name}(a, b)")(impl)


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


def _bitwise(name, symbol):
    def impl(xp, input, other):  # noqa: A002
        return getattr(xp, name)(input, other)

    impl.__name__ = name
    impl.__doc__ = f"``a {symbol} b`` on integer or bool tensors."
    return op(name, kind="elementwise", promote="integer", template=f"a {symbol} b")(impl)


bitwise_and = _bitwise("bitwise_and", "&")
bitwise_or = _bitwise("bitwise_or", "|")
bitwise_xor = _bitwise("bitwise_xor", "^")


def _shift(name, symbol, numpy_name):
    def impl(xp, input, other):  # noqa: A002
        return getattr(xp, numpy_name)(input, other)

    impl.__name__ = name
    impl.__doc__ = f"``input {symbol} other``: bits of integer tensors shifted (``torch.{name}``)."
    return op(name, kind="elementwise", promote="integer", template=f"a {symbol} b")(impl)


bitwise_left_shift = _shift("bitwise_left_shift", "<<", "left_shift")
bitwise_right_shift = _shift("bitwise_right_shift", ">>", "right_shift")


@op("where", kind="elementwise", promote="common", promote_from=1, method=False, template="where(a, b, c)")
def where(xp, condition, input, other):  # noqa: A002
    """``a`` where ``condition`` holds, else ``b``; ``a`` and ``b`` may be numbers."""
    if getattr(condition, "dtype", None) != bool:
        raise DTypeError(f"where: condition must be a bool tensor, got {_described(condition)}; "
                         f"compare first, e.g. where(x > 0, ...), or cast with .bool()")
    selected = bit_select(condition, input, other)
    if selected is not None:
        return selected
    out = xp.where(condition, input, other)
    if not (hasattr(input, "dtype") or hasattr(other, "dtype")):  # two numbers: PyTorch's dtype, not numpy's float64
        out = out.astype(_dt.result_type((), (), (input, other)).np, copy=False)
    return out


def _described(value):
    return f"dtype {value.dtype}" if hasattr(value, "dtype") else type(value).__name__


@op("lerp", kind="elementwise", promote="float",
    template="where(abs(c) < 0.5, a + c * (b - a), b - (b - a) * (1 - c))")
def lerp(xp, input, end, weight):  # noqa: A002
    """``a + weight * (b - a)``, by PyTorch's formula (exact at ``weight == 1``); half precision
    computes in float32 and rounds once, as PyTorch does (``b - a`` may overflow in float16)."""
    if hasattr(input, "dtype") and input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(lerp.impl, xp, input, end, weight)
    if hasattr(input, "dtype") and input.dtype == xp.float16:
        wide = [v.astype(xp.float32) if hasattr(v, "dtype") else v for v in (input, end, weight)]
        return lerp.impl(xp, *wide).astype(xp.float16)
    if not hasattr(weight, "dtype"):
        if -0.5 < weight < 0.5:
            out = xp.subtract(end, input)
            out *= weight
            out += input
        else:  # b - (b - a) * (1 - weight), with the signs folded in
            out = xp.subtract(input, end)
            out *= 1 - weight
            out += end
        return out
    diff = xp.subtract(end, input)
    if weight.dtype != diff.dtype:  # a weight passed by keyword skips promotion
        weight = weight.astype(diff.dtype)
    low = weight * diff
    low += input
    high = weight - 1
    high = high * diff
    high += end
    return xp.where(xp.abs(weight) < 0.5, low, high)
