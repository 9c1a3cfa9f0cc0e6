"""`Graph`: an ordered list of `Node`s, the IR every fxkit pass reads and edits.

Nodes live in a doubly linked list around a sentinel, so inserting and
erasing are O(1) and iterating ``graph.nodes`` is safe while erasing the node
just visited. Every structural change bumps ``_version``; a `GraphModule`
compares it with the version its code was generated from and regenerates
lazily.

Example:
    >>> g = Graph()
    >>> x = g.placeholder("x")
    >>> g.output(g.call(fxkit.ops.relu, (x,)))
    >>> print(g)
    graph(x):
        %x    = placeholder[x]
        %relu = call[relu](%x)
        return %relu
"""
import copy as _copy
import re

from fxkit.codegen.namespace import Namespace
from fxkit.codegen.python import generate_forward
from fxkit.errors import GraphError
from fxkit.graph.display import graph_html
from fxkit.graph.lint import lint
from fxkit.graph.node import OPCODES, Node, map_aggregate, map_arg
from fxkit.graph.printer import format_graph, print_tabular
from fxkit.runtime.op import Op

_NO_DEFAULT = object()


class Graph:
    """A program of placeholder, get_attr, call and output nodes.

    Attributes:
        owning_module: the `GraphModule` whose code this graph is, or None.
        _tracer_cls: the `Tracer` class that recorded the graph (None for one built by hand), kept by
            copies, so code re-tracing a module can use the same leaf rules (torch.fx's name).
    """

    def __init__(self, owning_module=None, tracer_cls=None):
        root = Node.__new__(Node)
        root.graph, root._name, root._op, root._target = self, "", "root", None
        root._args, root._kwargs, root._inputs, root.users, root.meta = (), {}, {}, {}, {}
        root._prev = root._next = root
        root._erased = False
        self._root = root
        self._len = 0
        self._namespace = Namespace()
        self._version = 0
        self._insert_mode, self._insert_anchor = "before", root
        self._code_cache = None
        self.owning_module = owning_module
        self._tracer_cls = tracer_cls

    @property
    def nodes(self):
        """The nodes in order: iterable (also ``reversed``) and sized."""
        return _NodeList(self)

    # -- making nodes --------------------------------------------------------------
    def create_node(self, op, target, args=None, kwargs=None, name=None):
        """Insert a new node at the current insertion point (the end by default).

        Args:
            op: ``placeholder``, ``get_attr``, ``call`` or ``output``.
            target: see `Node.target`.
            args: positional arguments (nodes and constants, nested freely).
            kwargs: keyword arguments.
            name: the preferred name; made unique and valid. Defaults to one
                derived from the target (``add``, ``layer1_0_conv1``).
        """
        if op not in OPCODES:
            raise GraphError(f"create_node: unknown opcode {op!r}; expected one of {', '.join(OPCODES)}")
        if op == "call" and not (isinstance(target, (Op, str)) or callable(target)):
            raise GraphError(f"create_node: a call's target must be an Op, a callable or a submodule's "
                             f"qualified name, got {type(target).__name__} {target!r}")
        if op in ("placeholder", "get_attr") and type(target) is not str:
            raise GraphError(f"create_node: a {op}'s target is a name (str), got {type(target).__name__}")
        candidate = name if name is not None else _candidate_name(op, target)
        node = Node(self, self._namespace.create_name(candidate), op, target, args or (), kwargs)
        if self._insert_mode == "before":
            self._link(node, self._insert_anchor)
        else:
            self._link(node, self._insert_anchor._next)
            self._insert_anchor = node
        self._len += 1
        return node

    def placeholder(self, name, default=_NO_DEFAULT):
        """A graph input called ``name``, optionally with a default value; ``"*args"`` / ``"**kwargs"``
        make the starred parameters of ``forward`` (the node is named without the stars)."""
        return self.create_node("placeholder", name, () if default is _NO_DEFAULT else (default,),
                                name=name.lstrip("*") if type(name) is str else name)

    def get_attr(self, qualname, name=None):
        """Read the owning module's attribute ``qualname`` (``"layer1.0.conv1.weight"``)."""
        return self.create_node("get_attr", qualname, name=name)

    def call(self, target, args=(), kwargs=None, name=None):
        """Apply ``target`` (an `Op`, a wrapped function or a submodule path) to args."""
        return self.create_node("call", target, args, kwargs, name=name)

    def output(self, result):
        """The graph's result: any nesting of tuples, lists and dicts of nodes."""
        return self.create_node("output", "output", (result,))

    def inserting_before(self, node=None):
        """New nodes go before ``node`` (the start of the graph when None).

        Usable as a context manager that restores the previous insertion point.
        """
        return _InsertPoint(self, "before", node if node is not None else self._root._next)

    def inserting_after(self, node=None):
        """New nodes go after ``node``, in creation order (the start when None)."""
        return _InsertPoint(self, "after", node if node is not None else self._root)

    # -- editing -----------------------------------------------------------------
    def erase_node(self, node):
        """Remove ``node``; refused while other nodes still use it."""
        if node.graph is not self:
            raise GraphError(f"erase_node: %{node.name} belongs to another graph; erase it with "
                             f"node.graph.erase_node(node)")
        if node._erased:
            raise GraphError(f"erase_node: %{node.name} was already erased")
        if node.users:
            users = ", ".join(repr(u) for u in node.users)
            raise GraphError(f"erase_node: %{node.name} still has users ({users}); "
                             f"call node.replace_all_uses_with(...) first")
        for used in node._inputs:
            used.users.pop(node, None)
        node._inputs = {}
        if node is self._insert_anchor:
            self._insert_anchor = node._next if self._insert_mode == "before" else node._prev
        # NOTE: the erased node keeps its own prev/next, so an iteration that has
        # just yielded it continues with the node that followed it.
        node._prev._next = node._next
        node._next._prev = node._prev
        node._erased = True
        self._len -= 1
        self._version += 1

    def node_copy(self, node, arg_transform=lambda n: n):
        """Insert a copy of ``node`` (from any graph), mapping its input nodes.

        Args:
            node: the node to copy; its name is kept when free, its meta is copied.
            arg_transform: maps each input node to the value the copy reads.
        """
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        new = self.create_node(node.op, node.target, args, kwargs, name=node.name)
        new.meta = _copy.copy(node.meta)
        return new

    def graph_copy(self, other, val_map):
        """Copy the nodes of ``other`` into this graph; returns what its output reads.

        Args:
            other: the graph to copy.
            val_map: other's nodes -> values here; filled in as nodes are copied.
                Nodes already in it (e.g. placeholders) are not copied.
        """
        for node in other.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                return map_arg(node.args[0], val_map.__getitem__) if node.args else None
            val_map[node] = self.node_copy(node, val_map.__getitem__)
        return None

    def copy(self):
        """A new graph with copies of every node (names and meta kept)."""
        new = Graph(tracer_cls=self._tracer_cls)
        env = {}
        for node in self.nodes:
            env[node] = new.node_copy(node, env.__getitem__)
        return new

    def eliminate_dead_code(self, is_impure_node=None):
        """Erase nodes nobody uses, keeping placeholders, the output and impure calls.

        Args:
            is_impure_node: ``fn(node) -> bool`` deciding which nodes must stay
                even when unused, in place of `Node.is_impure` (as torch.fx's).

        Returns:
            True when something was erased.
        """
        impure = is_impure_node if is_impure_node is not None else Node.is_impure
        changed = False
        for node in reversed(self.nodes):
            if not node.users and node.op not in ("placeholder", "output") and not impure(node):
                self.erase_node(node)
                changed = True
        return changed

    def _link(self, node, before):
        prev = before._prev
        node._prev, node._next = prev, before
        prev._next = node
        before._prev = node
        self._version += 1

    def _move(self, node, before):
        if node is before or node._next is before:
            return
        if node.graph is not self or node._erased:
            raise GraphError(f"moving %{node.name}: it is not a live node of this graph (erased, or of another "
                             f"graph); copy it in with graph.node_copy(node) instead")
        node._prev._next = node._next
        node._next._prev = node._prev
        self._link(node, before)

    # -- queries -----------------------------------------------------------------
    def find_nodes(self, op=None, target=None):
        """The nodes with the given opcode and/or target, in order.

        Raises:
            GraphError: ``op`` is no opcode (``call_function``, ``call_module`` and
                ``call_method`` are all ``call`` in fxkit).
        """
        if op is not None and op not in OPCODES:
            raise GraphError(f"find_nodes: {op!r} is no opcode; the four are {', '.join(OPCODES)} "
                             f"(torch.fx's call_function, call_method and call_module are all 'call')")
        found = []
        for node in self.nodes:
            if op is not None and node._op != op:
                continue
            if target is not None:
                t = node._target
                if not (t is target or (type(target) is str and type(t) is str and t == target)):
                    continue
            found.append(node)
        return found

    def output_node(self):
        """The output node (the last one when a malformed graph has several)."""
        for node in reversed(self.nodes):
            if node._op == "output":
                return node
        raise GraphError("the graph has no output node; add one with graph.output(value)")

    def lint(self):
        """Check the graph is well formed; raises `GraphError` naming the bad node."""
        lint(self)

    # -- code and text -------------------------------------------------------------
    def python_code(self, root="self"):
        """The generated ``forward`` (a `fxkit.codegen.python.PythonCode`; ``.src`` is the text).

        Generated once per version of the graph: asking again before an edit
        (a pass manager recompiling after a pass that changed nothing) is free.
        """
        cached = self._code_cache
        if cached is not None and cached[0] == self._version and cached[1] == root:
            return cached[2]
        code = generate_forward(self.nodes, root)
        self._code_cache = (self._version, root, code)
        return code

    def __str__(self):
        return format_graph(self)

    def print_tabular(self, console=None):
        """Print the nodes as a rich table (opcode, name, target, args, kwargs, shape)."""
        print_tabular(self, console)

    def _repr_html_(self):
        """Jupyter's view of the graph: the printed text, coloured (`fxkit.graph.display`)."""
        return graph_html(self)

    # -- copying and pickling -----------------------------------------------------
    def __getstate__(self):
        index = {node: i for i, node in enumerate(self.nodes)}

        def ref(node):
            try:
                return _Ref(index[node])
            except KeyError:
                raise GraphError(f"cannot save the graph: %{node.name} is used but is not in it") from None

        records = [(n.name, n.op, n.target, map_arg(n.args, ref), map_arg(n.kwargs, ref), n.meta)
                   for n in self.nodes]
        return {"nodes": records, "tracer_cls": self._tracer_cls}

    def __setstate__(self, state):
        self.__init__(tracer_cls=state.get("tracer_cls"))
        made = []

        def deref(value):
            return made[value.index] if type(value) is _Ref else value

        for name, op, target, args, kwargs, meta in state["nodes"]:
            # Inputs may come later in the list (a broken graph); fill them in after.
            node = self.create_node(op, target, name=name)
            node.meta = meta
            made.append(node)
        for node, (_, _, _, args, kwargs, _) in zip(made, state["nodes"]):
            node._set_arguments(map_aggregate(args, deref), map_aggregate(kwargs, deref))

    def __deepcopy__(self, memo):
        new = Graph.__new__(Graph)
        memo[id(self)] = new
        new.__setstate__(_copy.deepcopy(self.__getstate__(), memo))
        return new

    def __copy__(self):
        return self.copy()


class _Ref:
    """A pickled graph's reference to its node number ``index``."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __getstate__(self):
        return self.index

    def __setstate__(self, index):
        self.index = index

    def __deepcopy__(self, memo):
        return self


class _NodeList:
    """``graph.nodes``: a live view; skips nodes erased while iterating."""

    __slots__ = ("_graph",)

    def __init__(self, graph):
        self._graph = graph

    def __len__(self):
        return self._graph._len

    def __iter__(self):
        root = self._graph._root
        node = root._next
        while node is not root:
            if not node._erased:
                yield node
            node = node._next

    def __reversed__(self):
        root = self._graph._root
        node = root._prev
        while node is not root:
            if not node._erased:
                yield node
            node = node._prev

    def __repr__(self):
        return f"<{len(self)} nodes: {', '.join(repr(n) for n in self)}>"


class _InsertPoint:
    """Sets a graph's insertion point now; as a context manager, restores it on exit."""

    def __init__(self, graph, mode, anchor):
        self.graph = graph
        self.saved = (graph._insert_mode, graph._insert_anchor)
        graph._insert_mode, graph._insert_anchor = mode, anchor

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.graph._insert_mode, self.graph._insert_anchor = self.saved
        return False


_CAMEL_HUMP = re.compile(r"(?<=[a-z])([A-Z])")


def snake_case(name):
    """``activations.PascalCase`` -> ``activations.pascal_case`` (torch.fx's ``_snake_case``)."""
    return _CAMEL_HUMP.sub(r"_\1", name).lower()


def _candidate_name(op, target):
    if op == "output":
        return "output"
    if type(target) is str:
        # NOTE: a placeholder keeps its argument's spelling; submodule and attribute paths are
        # snake-cased as torch.fx names them (``self.activations.PascalCase`` -> activations_pascal_case).
        return target if op == "placeholder" else snake_case(target)
    if isinstance(target, Op):
        return target.name
    # NOTE: a class called as a function (``CustomArgObject(x, y)``) names its node custom_arg_object,
    # as torch.fx does, so the node never shadows the class's global in generated code.
    return snake_case(getattr(target, "__name__", None) or type(target).__name__)
