"""Tracing a ``forward(self, x, *args, **kwargs)``: one placeholder for each starred parameter.

Python cannot bind a traced value to ``*args`` or ``**kwargs`` (it would have to know how many
values or which keys there are), so, as torch.fx does, the function is traced through a copy
whose code takes those two as ordinary positional parameters: inside it ``args`` is the proxy of
the ``*args`` placeholder and ``kwargs['foo']`` records a ``getitem``. The generated ``forward``
takes ``*args`` / ``**kwargs`` again (the placeholder's target keeps its stars).
"""
import inspect
import types

from fxkit.errors import TraceError


def flatten_variadic(fn, args, kwargs):
    """``(fn, args, kwargs)`` to call; when ``kwargs`` holds ``"*name"``/``"**name"`` proxies, a copy
    of ``fn`` taking every parameter positionally, in its code's order, and those values."""
    starred = {key: value for key, value in kwargs.items() if key.startswith("*")}
    if not starred:
        return fn, args, kwargs
    if not isinstance(fn, types.FunctionType):
        raise TraceError(f"symbolic_trace: {fn!r} takes {', '.join(starred)}, which can only be traced in a "
                         f"Python function; give it named arguments")
    code = fn.__code__
    names = code.co_varnames
    first_kwonly = code.co_argcount
    values = list(args) + [kwargs[name] for name in names[first_kwonly:first_kwonly + code.co_kwonlyargcount]]
    slot = first_kwonly + code.co_kwonlyargcount
    if code.co_flags & inspect.CO_VARARGS:
        values.append(starred["*" + names[slot]])
        slot += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        values.append(starred["**" + names[slot]])
    flat = code.replace(co_argcount=len(values), co_kwonlyargcount=0,
                        co_flags=code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))
    traced = types.FunctionType(flat, fn.__globals__, fn.__name__, None, fn.__closure__)
    traced.__qualname__ = fn.__qualname__
    return traced, values, {}
