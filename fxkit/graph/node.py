"""`Node`: one operation of a `Graph` (placeholder, get_attr, call or output).

A node's ``args``/``kwargs`` hold other nodes wherever the operation reads a
value the graph computes (any nesting of tuples, lists, dicts and slices) and
plain constants elsewhere. Assigning ``args``/``kwargs`` keeps every input's
``users`` up to date, so ``users`` can always be trusted by passes; the lists
and dicts inside are stored immutable (`fxkit.graph.immutable`), so no edit
can slip past that bookkeeping.
"""
from typing import NamedTuple

from fxkit.graph.immutable import ImmutableDict, ImmutableList, freeze
from fxkit.runtime.op import Op

OPCODES = ("placeholder", "get_attr", "call", "output")


class SourceLocation(NamedTuple):
    """Where in the user's code a node came from (the tracer fills ``meta["stack"]``).

    ``str(loc)`` is the ``at ...`` part of fxkit's error layout:
    ``model.py:42 in forward: y = self.fc(x)``. Imported models also say which
    submodule of theirs the node belongs to (``module``, a qualified name like
    ``"layer1.0.conv1"``), so a graph can be read and cut by layer.
    """

    filename: str
    lineno: int
    function: str
    line: str
    module: str = ""

    def __str__(self):
        where = f"{self.filename}:{self.lineno} in {self.function}" if self.filename else ""
        where = f"{where}: {self.line}" if self.line else where
        if self.module:
            where = f"{where} (module {self.module})" if where else f"module {self.module}"
        return where


class Node:
    """One operation in a graph.

    Attributes:
        graph: the `Graph` holding the node.
        name: a unique valid identifier, also the variable name in generated code.
        op: ``placeholder``, ``get_attr``, ``call`` or ``output``.
        target: the argument name (placeholder), a qualified attribute name
            (get_attr), an `Op`, a wrapped function or a submodule's qualified name
            (call), or ``"output"``.
        users: the nodes reading this one (a dict used as an ordered set).
        meta: whatever passes record: ``shape``, ``dtype``, ``stack``, ...

    Example:
        >>> add = graph.call(fxkit.ops.add, (x, y))
        >>> add.is_op(fxkit.ops.add), add.args
        (True, (%x, %y))
    """

    __slots__ = ("graph", "_name", "_op", "_target", "_args", "_kwargs", "_inputs", "users", "meta",
                 "_prev", "_next", "_erased", "__weakref__")

    def __init__(self, graph, name, op, target, args=(), kwargs=None):
        self.graph = graph
        self._name = name
        self._op = op
        self._target = target
        self.users = {}
        self.meta = {}
        self._erased = False
        self._prev = self._next = self
        self._inputs = {}
        self._args = ()
        self._kwargs = ImmutableDict()
        self._set_arguments(tuple(args), dict(kwargs) if kwargs else {})

    # -- fields whose change invalidates generated code --------------------------
    @property
    def name(self):
        """The node's unique identifier; assigning makes the new name valid and unique."""
        return self._name

    @name.setter
    def name(self, candidate):
        self._name = self.graph._namespace.create_name(candidate)
        self.graph._version += 1

    @property
    def op(self):
        """The opcode: ``placeholder``, ``get_attr``, ``call`` or ``output``."""
        return self._op

    @op.setter
    def op(self, value):
        self._op = value
        self.graph._version += 1

    @property
    def target(self):
        """What the node reads or calls (see the class docstring); assigning marks code stale."""
        return self._target

    @target.setter
    def target(self, value):
        self._target = value
        self.graph._version += 1

    @property
    def args(self):
        """The positional arguments (a tuple, its lists immutable); assigning updates ``users``."""
        return self._args

    @args.setter
    def args(self, value):
        self._set_arguments(tuple(value), self._kwargs)

    @property
    def kwargs(self):
        """The keyword arguments (an immutable dict); assigning updates ``users``."""
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value):
        self._set_arguments(self._args, dict(value))

    def _set_arguments(self, args, kwargs):
        args = freeze(args)
        kwargs = freeze(kwargs)
        for old in self._inputs:
            old.users.pop(self, None)
        inputs = {}
        _collect_nodes(args, inputs)
        _collect_nodes(kwargs, inputs)
        self._args = args
        self._kwargs = kwargs
        self._inputs = inputs
        for new in inputs:
            new.users[self] = None
        self.graph._version += 1

    # -- neighbours ------------------------------------------------------------
    @property
    def prev(self):
        """The node before this one (the graph's sentinel before the first node)."""
        return self._prev

    @property
    def next(self):
        """The node after this one (the graph's sentinel after the last node)."""
        return self._next

    def prepend(self, node):
        """Move ``node`` to just before this node."""
        self.graph._move(node, before=self)

    def append(self, node):
        """Move ``node`` to just after this node."""
        self.graph._move(node, before=self._next)

    @property
    def all_input_nodes(self):
        """The nodes this node reads, in order of first appearance in args, kwargs."""
        return list(self._inputs)

    @property
    def tag(self):
        """The node's tag (``meta["tag"]``), read by `fxkit.transforms.split_by_tags`; None when untagged.

        torch.fx code sets ``node.tag = "..."`` as a free attribute; fxkit nodes keep
        such annotations in ``meta``, which every pass carries over.
        """
        return self.meta.get("tag")

    @tag.setter
    def tag(self, value):
        self.meta["tag"] = value

    @property
    def stack(self):
        """The user's source location recorded by the tracer, or None."""
        return self.meta.get("stack")

    @property
    def module_path(self):
        """The qualified name of the imported model's submodule this node came from (``"layer1.0.conv1"``),
        or ``""`` (traced fxkit code, or the model's own top level)."""
        stack = self.meta.get("stack")
        return getattr(stack, "module", "") or ""

    # -- editing ---------------------------------------------------------------
    def replace_all_uses_with(self, new, delete_user_cb=None, propagate_meta=False):
        """Make every user of this node read ``new`` instead.

        Args:
            new: the replacement node (or value).
            delete_user_cb: called with each user; users for which it returns
                False keep reading this node.
            propagate_meta: copy this node's ``meta`` entries missing from ``new``.

        Returns:
            The users that were changed.
        """
        if propagate_meta and isinstance(new, Node):
            for key, value in self.meta.items():
                new.meta.setdefault(key, value)
        changed = []
        for user in list(self.users):
            if user is new or (delete_user_cb is not None and not delete_user_cb(user)):
                continue
            user.replace_input_with(self, new)
            changed.append(user)
        return changed

    def replace_input_with(self, old, new):
        """Read ``new`` wherever this node reads ``old``."""
        def swap(node):
            return new if node is old else node

        self._set_arguments(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def update_arg(self, index, value):
        """Set positional argument ``index`` to ``value``."""
        args = list(self._args)
        args[index] = value
        self.args = args

    def insert_arg(self, index, value):
        """Insert ``value`` at position ``index`` of the positional arguments (list.insert's rule)."""
        args = list(self._args)
        args.insert(index, value)
        self.args = args

    def update_kwarg(self, key, value):
        """Set keyword argument ``key`` to ``value``."""
        kwargs = dict(self._kwargs)
        kwargs[key] = value
        self.kwargs = kwargs

    # -- matching --------------------------------------------------------------
    def is_op(self, op):
        """True for a ``call`` of ``op`` (an `Op`, or an op's name)."""
        if self._op != "call":
            return False
        target = self._target
        return target is op or (type(op) is str and isinstance(target, Op) and target.name == op)

    def is_module(self, gm, cls):
        """True for a ``call`` of a submodule of ``gm`` that is an instance of ``cls``."""
        if self._op != "call" or type(self._target) is not str:
            return False
        try:
            return isinstance(gm.get_submodule(self._target), cls)
        except AttributeError:
            return False

    def is_impure(self):
        """True when removing this node could change what the program does.

        Placeholders and the output always count; a ``call`` does when its `Op` is
        not pure, its function was wrapped as impure (``fn._fxkit_impure``), or its
        submodule says so (``module._is_impure``).
        """
        op = self._op
        if op in ("placeholder", "output"):
            return True
        if op != "call":
            return False
        target = self._target
        if isinstance(target, Op):
            return not target.pure
        if type(target) is str:
            owner = self.graph.owning_module
            if owner is None:
                return False
            try:
                return bool(getattr(owner.get_submodule(target), "_is_impure", False))
            except AttributeError:
                return False
        return bool(getattr(target, "_fxkit_impure", False))

    # -- printing --------------------------------------------------------------
    def format_node(self):
        """The node as one line of ``str(graph)``: ``%add = call[add](%x, %y)``."""
        if self._op == "output":
            return f"return {format_arg(self._args[0]) if self._args else 'None'}"
        return f"%{self._name} = {format_operation(self)}"

    def __repr__(self):
        return f"%{self._name}"


# -- nested arguments ---------------------------------------------------------------
def map_aggregate(value, fn):
    """Apply ``fn`` to every leaf of nested tuples, lists, dicts and slices.

    A node's immutable lists and dicts come back as plain ones: the result is
    a new value (runtime arguments, or the arguments of a new node, frozen then).
    """
    kind = type(value)
    if kind is tuple:
        return tuple(map_aggregate(v, fn) for v in value)
    if kind is list or kind is ImmutableList:
        return [map_aggregate(v, fn) for v in value]
    if kind is dict or kind is ImmutableDict:
        return {k: map_aggregate(v, fn) for k, v in value.items()}
    if kind is slice:
        return slice(map_aggregate(value.start, fn), map_aggregate(value.stop, fn), map_aggregate(value.step, fn))
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return kind(*(map_aggregate(v, fn) for v in value))
    return fn(value)


def map_arg(value, fn):
    """Apply ``fn`` to every `Node` inside ``value`` (nested containers too)."""
    return map_aggregate(value, lambda v: fn(v) if isinstance(v, Node) else v)


def _collect_nodes(value, found):
    kind = type(value)
    if kind is Node:
        found[value] = None
    elif kind is tuple or kind is list or kind is ImmutableList:
        for v in value:
            _collect_nodes(v, found)
    elif kind is dict or kind is ImmutableDict:
        for v in value.values():
            _collect_nodes(v, found)
    elif kind is slice:
        _collect_nodes(value.start, found)
        _collect_nodes(value.stop, found)
        _collect_nodes(value.step, found)
    elif isinstance(value, Node):
        found[value] = None
    elif isinstance(value, tuple):
        for v in value:
            _collect_nodes(v, found)


# -- text -----------------------------------------------------------------------
def format_arg(value, depth=0):
    """An argument as printed in graphs: nodes as ``%name``, constants like Python (ints too long
    for ``repr`` as ``<int of N bits>``, containers past 32 levels as ``...``)."""
    if isinstance(value, Node):
        return f"%{value._name}"
    kind = type(value)
    if kind is int and value.bit_length() > 256:
        return f"<int of {value.bit_length()} bits>"
    if depth > 32 and kind in (tuple, list, dict, slice):
        return "..."
    depth += 1
    if kind is tuple:
        inner = ", ".join(format_arg(v, depth) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if kind is list or kind is ImmutableList:
        return "[" + ", ".join(format_arg(v, depth) for v in value) + "]"
    if kind is dict or kind is ImmutableDict:
        return "{" + ", ".join(f"{format_arg(k, depth)}: {format_arg(v, depth)}" for k, v in value.items()) + "}"
    if kind is slice:
        return (f"slice({format_arg(value.start, depth)}, {format_arg(value.stop, depth)}, "
                f"{format_arg(value.step, depth)})")
    if isinstance(value, Op):
        return f"ops.{value.name}"
    text = repr(value)
    if "\n" in text or len(text) > 80:
        return f"<{kind.__name__}>"
    return text


def format_target(node):
    """``add`` for an op, ``self.layer1.0`` for a submodule, a function's qualified name
    (``operator.add``, ``builtins.getattr`` for Python's own, as torch.fx prints them)."""
    target = node._target
    if node._op == "call":
        if isinstance(target, Op):
            return target.name
        if type(target) is str:
            return "self." + _format_path(target)
        name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
        if name is None:
            return repr(target)
        # operator.add and builtins.getattr would otherwise read like the registry's add and getattr ops.
        module = _PLAIN_MODULES.get(getattr(target, "__module__", None))
        return f"{module}.{name}" if module else name
    if node._op == "placeholder" and type(target) is str and target.lstrip("*").isidentifier():
        return target  # ``*args`` / ``**kwargs`` as the signature spells them
    return _format_path(target) if type(target) is str else repr(target)


_PLAIN_MODULES = {"builtins": "builtins", "_operator": "operator", "operator": "operator"}


def format_operation(node):
    """``call[add](%x, %y, alpha=2)``: the part of a node's line after ``=``."""
    op = node._op
    text = f"{op}[{format_target(node)}]"
    if op == "placeholder":
        return text + (f"(default={format_arg(node._args[0])})" if node._args else "")
    if op == "get_attr":
        return text
    parts = [format_arg(a) for a in node._args]
    parts += [f"{_format_key(k)}={format_arg(v)}" for k, v in node._kwargs.items()]
    return f"{text}({', '.join(parts)})"


def _format_path(path):
    """A qualified name printed as is when it is dotted identifiers/indices, else quoted."""
    if all(part.isidentifier() or part.isdigit() for part in path.split(".")):
        return path
    return repr(path)


def _format_key(key):
    return key if type(key) is str and key.isidentifier() else repr(key)
