"""The patches that exist only while a trace runs.

``Module.__call__`` records leaf modules as one ``call`` node each,
``Module.__getattr__`` turns parameters and buffers into ``get_attr`` proxies,
``Module.__setattr__`` refuses to change the traced modules, and the functions
registered with ``fxkit.wrap("name")`` and the tracer's autowrapped functions
(`fxkit.tracer.autowrap`) record themselves. Everything is put
back in ``finally``, also when the trace fails.
"""
import contextlib

from fxkit.runtime import nn
from fxkit.runtime.tensor import Tensor
from fxkit.tracer.autowrap import patch_autowrapped
from fxkit.tracer.proxy import trace_error
from fxkit.tracer.wrap import patch_wrapped

_PATCHED = ("__call__", "__getattr__", "__setattr__")
_MISSING = object()


@contextlib.contextmanager
def patched(tracer):
    """Route module calls and attribute access of ``tracer.root``'s tree to ``tracer``."""
    cls = nn.Module
    saved = {name: cls.__dict__.get(name, _MISSING) for name in _PATCHED}
    paths = tracer._module_paths
    call, setattr_ = cls.__call__, cls.__setattr__
    getattr_ = getattr(cls, "__getattr__", _no_attribute)
    is_leaf = tracer.is_leaf_module

    def module_call(mod, *args, **kwargs):
        path = paths.get(id(mod))
        if path is not None and is_leaf(mod, path):
            return tracer.create_proxy("call", path, args, kwargs)
        return call(mod, *args, **kwargs)

    def module_getattr(mod, name):
        value = getattr_(mod, name)
        if isinstance(value, Tensor):
            path = paths.get(id(mod))
            if path is not None:
                return tracer._attr_proxy(value, f"{path}.{name}" if path else name)
        return value

    def module_setattr(mod, name, value):
        if id(mod) in paths:
            where = paths[id(mod)] or type(mod).__name__
            raise trace_error(
                f"in-place mutation of a module attribute: `self.{name} = ...` on {where} while tracing; "
                f"a traced graph cannot change its module's state",
                hint="return the value instead of storing it, or make the module a leaf "
                     "(subclass fxkit.Tracer and override is_leaf_module)")
        setattr_(mod, name, value)

    with contextlib.ExitStack() as undo:
        # NOTE: each patch registers its undo as soon as it is made, so a failure while
        # patching (a wrap of a missing name) leaves nothing patched behind.
        cls.__call__, cls.__getattr__, cls.__setattr__ = module_call, module_getattr, module_setattr
        undo.callback(_restore_class, cls, saved)
        undo.callback(patch_wrapped(tracer))
        namespaces = [tracer._fn_globals] + [vars(m) for m in tracer._autowrap_modules]
        undo.callback(patch_autowrapped(tracer, namespaces))
        yield


def _restore_class(cls, saved):
    for name, value in saved.items():
        if value is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, value)


def _no_attribute(mod, name):
    raise AttributeError(f"{type(mod).__name__!r} object has no attribute {name!r}")
