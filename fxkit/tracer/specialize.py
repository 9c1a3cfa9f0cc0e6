"""Guards of ``concrete_args``: a specialised graph checks its argument still has the value.

``symbolic_trace(m, concrete_args={"scale": None})`` records the branch taken
for ``scale=None`` only. torch.fx guards that in the generated code
(``torch._assert(scale == x)``, ``_assert_is_none(scale)``); fxkit records one
``call[check_specialized](%scale, None, 'scale')`` node after the placeholders,
so the generated ``forward`` calls the guard (a global bound by code
generation, with the expected value as a constant or global, never pasted
text) and every pass keeps it (it is impure). Calling ``gm(x, scale=3.0)``
then raises `SpecializationError` instead of returning the ``None`` result.

Values are compared with ``==`` (``None`` with ``is``; NaN equals NaN) when they
are Python scalars, strings, dtypes, devices or tuples/lists/dicts of them;
other values (tensors, modules, arbitrary objects) get no guard, as in torch.fx.
"""
from fxkit.errors import FxkitError, SpecializationError
from fxkit.runtime.device import Device
from fxkit.runtime.dtypes import DType
from fxkit.tracer.wrap import IMPURE_FLAG

_ATOMS = (type(None), bool, int, float, complex, str, bytes, DType, Device)


def guardable(value):
    """Whether ``value`` can be checked with ``==`` (atoms and containers of them)."""
    if isinstance(value, _ATOMS):
        return True
    if isinstance(value, (tuple, list)):
        return all(guardable(v) for v in value)
    if isinstance(value, dict):
        return all(guardable(k) and guardable(v) for k, v in value.items())
    return False


def check_specialized(value, expected, name):
    """Raise `SpecializationError` unless ``value`` is the value ``name`` was traced with."""
    if not _same(value, expected):
        raise SpecializationError(
            f"argument {name!r} was specialised to {expected!r} by symbolic_trace(..., concrete_args="
            f"{{{name!r}: {expected!r}}}), so the graph holds only the code for that value, but this call "
            f"passed {value!r:.80}\n  hint: call with {name}={expected!r} (or leave it out), or trace again "
            f"with concrete_args={{{name!r}: <the new value>}}")


setattr(check_specialized, IMPURE_FLAG, True)  # NOTE: never removed by dead-code elimination


def _same(value, expected):
    if expected is None or value is None:
        return value is expected
    if type(expected) is float and expected != expected:
        return isinstance(value, float) and value != value
    if isinstance(expected, (tuple, list)):
        return (isinstance(value, (tuple, list)) and len(value) == len(expected)
                and all(_same(v, e) for v, e in zip(value, expected)))
    if isinstance(expected, dict):
        return (isinstance(value, dict) and value.keys() == expected.keys()
                and all(_same(value[k], e) for k, e in expected.items()))
    try:
        return bool(value == expected)
    except (FxkitError, TypeError, ValueError, RuntimeError):  # e.g. a tensor passed where a number was traced
        return False
