"""Elementwise ops of two or three inputs, broadcasting like PyTorch."""
from fxkit.runtime.op import op


@op("add", kind="elementwise", promote="common", template="a + b * alpha")
def add(xp, a, b, alpha=1):
    """``a + alpha * b``."""
    return xp.add(a, b) if alpha == 1 else xp.add(a, b * alpha)


@op("sub", kind="elementwise", promote="common", template="a - b * alpha")
def sub(xp, a, b, alpha=1):
    """``a - alpha * b``."""
    return xp.subtract(a, b) if alpha == 1 else xp.subtract(a, b * alpha)


@op("mul", kind="elementwise", promote="common", template="a * b")
def mul(xp, a, b):
    """``a * b``."""
    return xp.multiply(a, b)


@op("div", kind="elementwise", promote="float", template="a / b")
def div(xp, a, b):
    """True division; integer inputs give the default float dtype."""
    return xp.true_divide(a, b)


@op("floor_divide", kind="elementwise", promote="common", template="floor_divide(a, b)")
def floor_divide(xp, a, b):
    """``a // b`` rounded toward negative infinity (PyTorch >= 1.13)."""
    return xp.floor_divide(a, b)


@op("remainder", kind="elementwise", promote="common", template="remainder(a, b)")
def remainder(xp, a, b):
    """Python's modulus: the result has the sign of ``b``."""
    return xp.remainder(a, b)


@op("pow", kind="elementwise", promote="common", template="pow(a, b)")
def pow(xp, a, b):
    """``a ** b``."""
    return xp.power(a, b)


@op("maximum", kind="elementwise", promote="common", template="maximum(a, b)")
def maximum(xp, a, b):
    """Elementwise maximum; NaN propagates."""
    return xp.maximum(a, b)


@op("minimum", kind="elementwise", promote="common", template="minimum(a, b)")
def minimum(xp, a, b):
    """Elementwise minimum; NaN propagates."""
    return xp.minimum(a, b)


def _comparison(name, ufunc, symbol):
    def impl(xp, a, b):
        return getattr(xp, ufunc)(a, b)

    impl.__doc__ = f"``a {symbol} b`` as a bool tensor."
    return op(name, kind="elementwise", promote="compare", template=f"a {symbol} b")(impl)


eq = _comparison("eq", "equal", "==")
ne = _comparison("ne", "not_equal", "!=")
lt = _comparison("lt", "less", "<")
le = _comparison("le", "less_equal", "<=")
gt = _comparison("gt", "greater", ">")
ge = _comparison("ge", "greater_equal", ">=")


def _logical(name):
    def impl(xp, a, b):
        return getattr(xp, name)(a, b)

    impl.__doc__ = f"``{name}`` of the truth values of ``a`` and ``b``."
    return op(name, kind="elementwise", promote="bool", template=f"{name}(a, b)")(impl)


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


def _bitwise(name, symbol):
    def impl(xp, a, b):
        return getattr(xp, name)(a, b)

    impl.__doc__ = f"``a {symbol} b`` on integer or bool tensors."
    return op(name, kind="elementwise", promote="integer", template=f"a {symbol} b")(impl)


bitwise_and = _bitwise("bitwise_and", "&")
bitwise_or = _bitwise("bitwise_or", "|")
bitwise_xor = _bitwise("bitwise_xor", "^")


@op("where", kind="elementwise", promote="common", promote_from=1, method=False, template="where(a, b, c)")
def where(xp, condition, a, b):
    """``a`` where ``condition`` holds, else ``b``."""
    return xp.where(condition, a, b)


@op("lerp", kind="elementwise", promote="common", template="a + c * (b - a)")
def lerp(xp, a, b, weight):
    """``a + weight * (b - a)``."""
    return xp.add(a, xp.multiply(weight, xp.subtract(b, a)))
