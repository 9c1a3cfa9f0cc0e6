"""Autowrap: functions recorded as one ``call`` node wherever the traced code reaches them.

torch.fx's ``Tracer(autowrap_modules=(math,), autowrap_functions=())``: while a
trace runs, every public function of the listed modules (``math.sqrt``) and
every listed function is swapped, in those modules and in the globals of the
traced ``forward`` (``from math import sqrt``), for a recorder. Called with a
traced value it records the call (a ``math`` function as its registry op,
``call[math_sqrt](%size)``, see `fxkit.runtime.ops.scalar_math`; anything else
as ``call[fn]``); called with plain values it just runs.
"""
import functools

from fxkit.runtime.ops.scalar_math import BY_FUNCTION
from fxkit.runtime.tracing_hook import find_proxy


def autowrap_table(modules, functions):
    """``id(fn) -> fn`` of the public functions of ``modules`` and of ``functions``."""
    table = {}
    for module in modules:
        for name, value in vars(module).items():
            if not name.startswith("_") and callable(value) and not isinstance(value, type):
                table[id(value)] = value
    for fn in functions:
        table[id(fn)] = fn
    return table


def patch_autowrapped(tracer, namespaces):
    """Swap the autowrapped functions found in each dict of ``namespaces``; returns the undo."""
    table = tracer._autowrap_table
    undo = []
    recorders = {}
    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if name.startswith("_") or table.get(id(value)) is not value:
                continue
            recorder = recorders.get(id(value))
            if recorder is None:
                recorder = recorders[id(value)] = _recording(value, tracer)
            namespace[name] = recorder
            undo.append((namespace, name, value))

    def restore():
        for namespace, name, value in reversed(undo):
            namespace[name] = value
    return restore


def _recording(fn, tracer):
    op = BY_FUNCTION.get(fn)

    @functools.wraps(fn)
    def recording(*args, **kwargs):
        if find_proxy(args, kwargs) is not None:
            if op is not None:
                return op(*args, **kwargs)
            return tracer.create_proxy("call", fn, args, kwargs)
        return fn(*args, **kwargs)
    return recording
