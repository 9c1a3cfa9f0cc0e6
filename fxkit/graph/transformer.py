"""`Transformer`: rebuild a `GraphModule` node by node through `Interpreter`'s methods.

Instead of values, the opcode methods return `Value`s standing for nodes of a
new graph, so a pass overrides only what it changes and the rest is copied::

    class ReluToGelu(Transformer):
        def call(self, target, args, kwargs):
            if target is fxkit.ops.relu:
                return super().call(fxkit.ops.gelu, args, kwargs)
            return super().call(target, args, kwargs)

    new_gm = ReluToGelu(gm).transform()

The node a step returns takes over the old node's ``meta`` (shape, source
line, ...); other nodes a step adds get its source line. Registry ops called on
`Value`s inside an override (``ops.add(v, 1)``, ``v * 2``) are recorded too.
"""
from fxkit.graph.graph import Graph
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.interpreter import Interpreter
from fxkit.graph.node import map_aggregate
from fxkit.graph.value import NodeValue
from fxkit.runtime import tracing_hook


class Value(NodeValue):
    """A node of the graph a `Transformer` builds, standing in for its value.

    Operators and op methods record new nodes (``v + 1`` adds a ``call[add]``).
    """

    __slots__ = ()


class Transformer(Interpreter):
    """Builds a new `GraphModule` from ``module`` through the opcode methods.

    Args:
        module: the `GraphModule` to transform.

    Attributes:
        new_graph: the graph being built.
    """

    def __init__(self, module):
        super().__init__(module, garbage_collect_values=False)
        self.new_graph = Graph()
        self._current = None

    def transform(self):
        """Run every node through the opcode methods; the new `GraphModule`."""
        tracing_hook.ACTIVE.append(self)
        try:
            self.run()
        finally:
            tracing_hook.ACTIVE.remove(self)
        return GraphModule(self.module, self.new_graph, class_name=type(self.module).__name__)

    def run_node(self, n):
        """Run ``n``'s opcode method; the nodes it added get ``n``'s source line, its result ``n``'s meta."""
        graph = self.new_graph
        last = graph._root._prev
        self._current = n
        try:
            result = super().run_node(n)
        finally:
            self._current = None
        made = last._next
        stack = n.meta.get("stack")
        while made is not graph._root:
            if stack is not None:
                made.meta.setdefault("stack", stack)
            made = made._next
        node = result.node if isinstance(result, Value) else graph.output_node() if n.op == "output" else None
        if node is not None:
            for key, value in n.meta.items():
                node.meta.setdefault(key, value)
        return result

    # -- the four opcodes, building nodes ----------------------------------------------
    def placeholder(self, target, args, kwargs):
        """A placeholder of the new graph (default kept)."""
        node = self.new_graph.create_node("placeholder", target, args, name=self._name_for(target))
        return Value(node, self)

    def get_attr(self, target, args, kwargs):
        """A ``get_attr`` of the new graph, reading the same attribute."""
        return Value(self.new_graph.get_attr(target, name=self._name_for(target)), self)

    def call(self, target, args, kwargs):
        """A ``call`` of ``target`` in the new graph (an override may pass another target)."""
        node = self.new_graph.call(target, _unwrap(args), _unwrap(kwargs), name=self._name_for(target))
        return Value(node, self)

    def output(self, target, args, kwargs):
        """The new graph's output node."""
        self.new_graph.output(_unwrap(args[0]) if args else None)

    def record_op(self, op, args, kwargs):
        """Called by the op registry when an op is applied to `Value`s in an override."""
        return Value(self.new_graph.call(op, _unwrap(args), _unwrap(kwargs)), self)

    def _name_for(self, target):
        """The old node's name when the step keeps its target; a fresh name otherwise."""
        current = self._current
        if current is not None and (current.target is target or
                                    (type(target) is str and current.target == target)):
            return current.name
        return None


def _unwrap(value):
    return map_aggregate(value, lambda v: v.node if isinstance(v, Value) else v)
