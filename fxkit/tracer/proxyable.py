"""`ProxyableClassMeta`: classes whose construction from traced values is recorded (torch.fx's).

``class TensorPair(metaclass=ProxyableClassMeta)``: calling ``TensorPair(a, b)`` while tracing, with
a traced value among the arguments, records one ``call[TensorPair](%a, %b)`` node instead of running
``__init__`` on proxies (which could branch on their values); the generated code constructs the
object when it runs. Without traced arguments the object is built at once and used as a constant.
"""
from fxkit.runtime.tracing_hook import ACTIVE, find_proxy


class ProxyableClassMeta(type):
    """Metaclass recording the construction of its classes from traced values (see the module docstring)."""

    def __call__(cls, *args, **kwargs):
        if ACTIVE:
            proxy = find_proxy(args, kwargs)
            if proxy is not None:
                return proxy.tracer.create_proxy("call", cls, args, kwargs)
        return super().__call__(*args, **kwargs)
