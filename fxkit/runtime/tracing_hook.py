"""The dispatch protocol the tracer plugs into, kept in the runtime so the
runtime never imports the tracer (docs/architecture.md, layers).

A tracer pushes itself on `ACTIVE` while it traces; its proxies subclass
`ProxyBase`. `Op.__call__` only scans its arguments for proxies while
`ACTIVE` is non-empty, so eager dispatch pays one list check.
"""

ACTIVE = []
EDITING = [0]
"""How many graph-editing recorders are alive (``Proxy(node)`` used outside a trace, torch.fx's
"graph editing with proxies"). `Op.run` looks for proxies among its arguments only while this is
non-zero, so eager calls pay one read when nobody edits a graph that way."""


class ProxyBase:
    """Marker base of the tracer's Proxy; ``tracer`` records calls.

    The tracer sets ``tracer`` to an object with ``record_op(op, args, kwargs)``.
    """

    __slots__ = ()


def find_proxy(args, kwargs):
    """The first proxy anywhere in ``args``/``kwargs`` (nested containers too)."""
    for a in args:
        p = _find(a)
        if p is not None:
            return p
    for a in kwargs.values():
        p = _find(a)
        if p is not None:
            return p
    return None


def _find(value):
    if isinstance(value, ProxyBase):
        return value
    if type(value) in (list, tuple) or isinstance(value, tuple):
        for v in value:
            p = _find(v)
            if p is not None:
                return p
    elif type(value) is dict:
        for v in value.values():
            p = _find(v)
            if p is not None:
                return p
    elif type(value) is slice:
        return _find((value.start, value.stop, value.step))
    return None
