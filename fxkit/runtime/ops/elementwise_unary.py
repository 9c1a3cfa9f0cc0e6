"""Elementwise ops of one input (activations and math functions)."""
from fxkit.runtime.op import op


@op("neg", kind="elementwise", promote="common", template="-a")
def neg(xp, a):
    return xp.negative(a)


@op("relu", kind="elementwise", promote="common", template="maximum(a, 0)")
def relu(xp, a):
    """``max(a, 0)``; NaN stays NaN."""
    return xp.maximum(a, 0)


@op("exp", kind="elementwise", promote="float", template="exp(a)")
def exp(xp, a):
    return xp.exp(a)


@op("bitwise_not", kind="elementwise", promote="integer", template="~a")
def bitwise_not(xp, a):
    """``~a``: logical not for bool tensors, two's complement for integers."""
    return xp.invert(a)


@op("abs", kind="elementwise", promote="common", template="abs(a)")
def abs(xp, a):
    return xp.abs(a)
