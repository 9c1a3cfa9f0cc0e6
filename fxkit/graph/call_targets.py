"""Call targets that are data: kinds of callable objects registered by the layers above.

Besides `Op`s, wrapped functions and submodule paths, a ``call`` node may call
an object a pass made, such as `fuse_elementwise`'s `FusedOp` (a name and a
body graph). The graph layer prints, draws and saves graphs holding such
targets without importing the pass that defines them: the class registers
itself here as a *call-target kind*, under a name the data-only save format
(`fxkit.tracer.serialize`) writes into its files. A registered class provides

* ``to_data(self, save_graph)``: the target as JSON-able data; nested graphs go
  through ``save_graph(graph)``, so their nodes are stored like any other's;
* ``from_data(cls, data, load_graph)`` (a classmethod): the target rebuilt from
  that data, nested graphs through ``load_graph(data)``. Loading must build the
  object from data only: it may run nothing the file names.

Example:
    >>> class FusedOp:
    ...     def to_data(self, save_graph):
    ...         return {"name": self.name, "graph": save_graph(self.graph)}
    ...     @classmethod
    ...     def from_data(cls, data, load_graph):
    ...         return cls(data["name"], load_graph(data["graph"]))
    >>> register_target_kind("fused_op", FusedOp)
"""
from typing import NamedTuple

from fxkit.errors import GraphError

_BY_NAME = {}
_BY_CLASS = {}


class TargetKind(NamedTuple):
    """A registered kind of call target: the name saved files use, and its class."""

    name: str
    cls: type


def register_target_kind(name, cls):
    """Let graphs calling instances of ``cls`` be saved and loaded (see the module docstring).

    Args:
        name: the kind's name in saved files; keep it stable across versions.
        cls: the class; it defines ``to_data`` and the classmethod ``from_data``.

    Returns:
        ``cls``, so the call can close a class definition's module.

    Raises:
        GraphError: ``cls`` lacks the two methods, or ``name`` is taken by another class.
    """
    if not (callable(getattr(cls, "to_data", None)) and callable(getattr(cls, "from_data", None))):
        raise GraphError(f"register_target_kind: {cls.__qualname__} needs a to_data(self, save_graph) method and "
                         f"a from_data(cls, data, load_graph) classmethod to be saved and loaded")
    known = _BY_NAME.get(name)
    # NOTE: the same class defined again (a reloaded module) replaces its old entry.
    if known is not None and (known.cls.__module__, known.cls.__qualname__) != (cls.__module__, cls.__qualname__):
        raise GraphError(f"register_target_kind: the name {name!r} is taken by {known.cls.__module__}."
                         f"{known.cls.__qualname__}; register {cls.__qualname__} under another name")
    if known is not None:
        del _BY_CLASS[known.cls]
    kind = _BY_NAME[name] = _BY_CLASS[cls] = TargetKind(name, cls)
    return kind.cls


def kind_of(target):
    """The `TargetKind` of ``target``'s class (or of a base class), or None when unregistered."""
    for klass in type(target).__mro__:
        kind = _BY_CLASS.get(klass)
        if kind is not None:
            return kind
    return None


def target_kind(name):
    """The `TargetKind` registered as ``name``.

    Raises:
        GraphError: no class registered that name (its module was not imported).
    """
    kind = _BY_NAME.get(name)
    if kind is None:
        known = ", ".join(sorted(_BY_NAME)) or "none"
        raise GraphError(f"unknown call-target kind {name!r} (registered: {known}); the module defining it "
                         f"registers it with fxkit.graph.register_target_kind when imported: import it first")
    return kind


def called_graph(node):
    """The sub-graph a ``call`` node's target runs (a `FusedOp`'s body), or None."""
    if node.op != "call":
        return None
    body = getattr(node.target, "graph", None)
    return body if body is not None and hasattr(body, "nodes") else None
