"""The op registry: every `Op` by name. Passes, shape inference, fusion and
backends iterate or look up ops here; nobody keeps a second list of ops."""

from fxkit.errors import FxkitError

_OPS = {}


def add_op(op):
    """Register ``op`` under its name; a second op of the same name is a bug."""
    if op.name in _OPS:
        raise FxkitError(f"op {op.name!r} is registered twice; op names are unique")
    _OPS[op.name] = op
    return op


def get_op(name):
    """The op called ``name``, with a clear error naming close matches."""
    try:
        return _OPS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _OPS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise FxkitError(f"no op named {name!r} is registered{hint}") from None


def all_ops():
    """Every registered op, in registration order."""
    return list(_OPS.values())
