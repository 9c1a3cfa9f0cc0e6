"""`fxkit.wrap`: keep a free function as one ``call`` node instead of tracing into it.

Code that needs concrete values (Python control flow on tensors, numpy, a
loop over a tensor's rows) traces when it sits in a wrapped function: the
tracer records the call, and the graph runs the real function on real
tensors. Two spellings, as in torch.fx:

    @fxkit.wrap                   # decorator: the returned function records itself
    def clip_rows(x): ...

    fxkit.wrap("clip_rows")       # at a module's top level: that module's global
                                  # ``clip_rows`` is patched while a trace runs
    fxkit.wrap("len")             # builtins too: ``len(x)`` in that module records
                                  # ``call[builtins.len](%x)``
"""
import builtins
import functools
import sys

from fxkit.errors import TraceError
from fxkit.runtime.tracing_hook import ACTIVE, find_proxy

IMPURE_FLAG = "_fxkit_impure"
"""Attribute set to True on a wrapped function that has effects: dead-code
elimination (`Node.is_impure`) then keeps its calls (``fxkit.wrap(fn, pure=False)``)."""

_BY_NAME = {}  # (id of module globals, function name) -> (module globals, name, pure)
_ABSENT = object()


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
    frame = sys._getframe(1)
    if frame.f_code.co_name == "<module>" and frame.f_globals.get(getattr(fn, "__name__", None)) is fn:
        # ``fxkit.wrap(fn)`` as a statement at a module's top level (torch.fx's form, the result
        # unused): the module's global is patched while a trace runs, as for wrap("name").
        _BY_NAME[id(frame.f_globals), fn.__name__] = (frame.f_globals, fn.__name__, pure)

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
    """Swap each ``wrap("name")`` global for a recording version; returns the undo.

    A name the module lacks is looked up in ``builtins`` (``wrap("len")``,
    ``wrap("getattr")``): the recorder is then put in the module's globals,
    where it shadows the builtin until the trace ends. A name found nowhere is
    a failed wrap: its registration is dropped, whatever was patched already is
    put back and `TraceError` says so, so it cannot fail every later trace too.
    """
    undo = []

    def restore():
        for module_globals, name, fn in reversed(undo):
            if fn is _ABSENT:
                module_globals.pop(name, None)
            else:
                module_globals[name] = fn

    for key, (module_globals, name, pure) in list(_BY_NAME.items()):
        fn = original = module_globals.get(name, _ABSENT)
        if fn is _ABSENT:
            fn = getattr(builtins, name, None)
        if fn is None or not callable(fn):
            restore()
            del _BY_NAME[key]
            raise TraceError(f"fxkit.wrap({name!r}): module {module_globals.get('__name__')!r} has no function "
                             f"{name!r} and no builtin has that name; the wrap is dropped (fix the name and call "
                             f"fxkit.wrap again, or decorate the function with @fxkit.wrap)")
        try:
            _mark(fn, pure)
        except TraceError:
            restore()
            del _BY_NAME[key]
            raise
        module_globals[name] = _recording(fn, tracer)
        undo.append((module_globals, name, original))
    return restore


def _recording(fn, tracer):
    @functools.wraps(fn)
    def recording(*args, **kwargs):
        if find_proxy(args, kwargs) is not None:
            return tracer.create_proxy("call", fn, args, kwargs)
        return fn(*args, **kwargs)
    return recording
