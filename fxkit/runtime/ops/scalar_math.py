"""Python's ``math`` functions as ops, for arithmetic on traced sizes.

``x / math.sqrt(x.size(-1))`` (attention's scale) needs the square root of a
size that is only a node while tracing. The tracer records ``math.sqrt`` on a
traced value as ``call[math_sqrt](%size)`` (`fxkit.Tracer`'s ``autowrap_modules``
default to ``(math,)``, as torch.fx's do), and the generated code calls the op,
which runs the ``math`` function itself: the same Python number as eager code,
also in shape inference (the shape rule is the function).
"""
import math

from fxkit.runtime.op import op

BY_FUNCTION = {}
"""``math`` function -> the op recording it (read by the tracer's autowrap)."""


def _register(fn, impl):
    name = f"math_{fn.__name__}"
    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = f"``math.{fn.__name__}`` on Python numbers (a traced size, a shape product)."
    registered = op(name, kind="shape", shape_rule=lambda *args, **kwargs: impl(None, *args, **kwargs),
                    method=False)(impl)
    BY_FUNCTION[fn] = registered
    return registered


def _unary(fn):
    def impl(xp, x):
        return fn(x)
    return impl


for _fn in (math.sqrt, math.floor, math.ceil, math.trunc, math.exp, math.log2, math.log10, math.fabs):
    _register(_fn, _unary(_fn))

_register(math.log, lambda xp, x, base=math.e: math.log(x, base))
_register(math.pow, lambda xp, x, y: math.pow(x, y))
_register(math.gcd, lambda xp, a, b: math.gcd(a, b))
_register(math.isqrt, lambda xp, n: math.isqrt(n))
