"""`fxkit.wrap`: keep a free function as one ``call`` node instead of tracing into it.

Code that needs concrete values (Python control flow on tensors, numpy, a
loop over a tensor's rows) traces when it sits in a wrapped function: the
tracer records the call, and the graph runs the real function on real
tensors. Two spellings, as in torch.fx:

    @fxkit.wrap                   # decorator: the returned function records itself
    def clip_rows(x): ...

    fxkit.wrap("clip_rows")       # at a module's top level: that module's global
                                  # ``clip_rows`` is patched while a trace runs
"""
import functools
import sys

from fxkit.errors import TraceError
from fxkit.runtime.tracing_hook import ACTIVE, find_proxy

IMPURE_FLAG = "_fxkit_impure"
"""Attribute set to True on a wrapped function that has effects: dead-code
elimination (`Node.is_impure`) then keeps its calls (``fxkit.wrap(fn, pure=False)``)."""

_BY_NAME = {}  # (id of module globals, function name) -> (module globals, name, pure)


def wrap(fn_or_name=None, *, pure=True):
    """Record calls of a free function as single graph nodes while tracing.

    Args:
        fn_or_name: the function (decorator form) or, called at a module's top
            level, the name of a function of that module.
        pure: False when the function has effects (printing, writing state), so
            dead-code elimination keeps its calls.

    Returns:
        The decorator form returns the function to use in place of ``fn`` (it
        calls ``fn`` directly when no trace is running); the name form returns
        the name.

    Example:
        >>> @fxkit.wrap
        ... def normalize_rows(x):
        ...     return x / max(float(x.abs().max()), 1e-6)
    """
    if fn_or_name is None:
        return functools.partial(wrap, pure=pure)
    if isinstance(fn_or_name, str):
        frame = sys._getframe(1)
        if frame.f_code.co_name != "<module>":
            raise TraceError(f"fxkit.wrap({fn_or_name!r}) must be called at a module's top level, where "
                             f"{fn_or_name!r} is a global; inside {frame.f_code.co_name}() use @fxkit.wrap")
        _BY_NAME[id(frame.f_globals), fn_or_name] = (frame.f_globals, fn_or_name, pure)
        return fn_or_name
    if not callable(fn_or_name):
        raise TypeError(f"fxkit.wrap: expected a function or its name, got {type(fn_or_name).__name__}")
    fn = fn_or_name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if ACTIVE:
            proxy = find_proxy(args, kwargs)
            if proxy is not None:
                return proxy.tracer.create_proxy("call", wrapper, args, kwargs)
        return fn(*args, **kwargs)

    _mark(wrapper, pure)
    return wrapper


def _mark(fn, pure):
    try:
        setattr(fn, IMPURE_FLAG, not pure)
    except AttributeError:  # builtins take no attributes; they count as pure
        if not pure:
            raise TraceError(f"fxkit.wrap: cannot mark builtin {fn!r} impure; wrap a Python function "
                             f"that calls it instead") from None


def patch_wrapped(tracer):
    """Swap each ``wrap("name")`` global for a recording version; returns the undo."""
    undo = []
    for module_globals, name, pure in _BY_NAME.values():
        fn = module_globals.get(name)
        if fn is None or not callable(fn):
            raise TraceError(f"fxkit.wrap({name!r}): module {module_globals.get('__name__')!r} has no "
                             f"function {name!r} to wrap")
        _mark(fn, pure)
        module_globals[name] = _recording(fn, tracer)
        undo.append((module_globals, name, fn))

    def restore():
        for module_globals, name, fn in reversed(undo):
            module_globals[name] = fn
    return restore


def _recording(fn, tracer):
    @functools.wraps(fn)
    def recording(*args, **kwargs):
        if find_proxy(args, kwargs) is not None:
            return tracer.create_proxy("call", fn, args, kwargs)
        return fn(*args, **kwargs)
    return recording
