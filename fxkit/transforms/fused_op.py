"""`FusedOp`: a group of elementwise ops that runs as one ``call`` node.

`fuse_elementwise` replaces each group of elementwise nodes by one call whose
target is a `FusedOp`. The fused op is plain data: a ``name`` (``fused_0``)
and a ``graph`` holding the group as a sub-graph, with one placeholder per
value the group reads and an output of the values used outside it (a tuple
when there are several). Backends generate one kernel from the body's nodes
and the registry templates of their ops; without a backend, calling the fused
op runs Python generated from the body, which calls the same ops in the same
order as the unfused graph and so gives bit-identical results.

``str(graph)`` prints the body nested under the graph using it, like
TorchScript's FusionGroup::

    graph(x):
        %x     = placeholder[x]
        %mul_1 = call[fused_0](%x)
        return %mul_1

    with fused_0 = graph(x):
        %x     = placeholder[x]
        %mul   = call[mul](%x, %x)
        %mul_1 = call[mul](%mul, %mul)
        return %mul_1
"""
from fxkit.codegen.namespace import is_plain_identifier
from fxkit.codegen.python import generate_forward
from fxkit.errors import GraphError
from fxkit.graph import Interpreter, map_arg, register_target_kind
from fxkit.runtime.op import Op
from fxkit.runtime import tracing_hook
from fxkit.transforms.shape_prop import record_meta


class FusedOp:
    """A call target running a sub-graph of elementwise ops as one step.

    Args:
        name: the op's name, a valid identifier unique in the graph using it
            (generated code calls it as a global of that name).
        graph: the body: placeholders for the group's inputs, ``call`` nodes of
            registry ops, and an output of the group's results.

    Attributes:
        name: as given; also ``__name__``, which printing and codegen read.
        graph: the body `Graph`.

    Example:
        >>> fused = gm.graph.find_nodes(op="call")[0].target
        >>> fused.name, [n.target.name for n in fused.graph.nodes if n.op == "call"]
        ('fused_0', ['mul', 'mul'])
        >>> fused(x)      # the body's result
    """

    def __init__(self, name, graph):
        self.name = self.__name__ = self.__qualname__ = name
        self.graph = graph
        self._compiled = None
        self._compiled_version = -1

    @property
    def num_outputs(self):
        """How many results the body returns (1 unless its output is a tuple)."""
        result = self.graph.output_node().args[0]
        return len(result) if type(result) is tuple else 1

    def __call__(self, *args):
        if tracing_hook.ACTIVE:
            proxy = tracing_hook.find_proxy(args, {})
            if proxy is not None:
                return proxy.tracer.record_op(self, args, {})
        graph = self.graph
        if self._compiled_version != graph._version:
            self._compile()
        try:
            return self._compiled(None, *args)
        except Exception:
            # Generated code loses which body node failed: replay it node by node,
            # which raises the same error naming the node and its source line.
            Interpreter(None, graph=graph).run(*args)
            raise

    def _compile(self):
        code = generate_forward(self.graph.nodes, root_name="self")
        namespace = code.globals
        exec(code.compile(f"<fxkit {self.name}>"), namespace)
        self._compiled = namespace["forward"]
        self._compiled_version = self.graph._version

    def shape_rule(self, *args):
        """The body's result metadata from its ops' shape rules (`TensorMeta` in, out).

        Lets shape inference and backends treat a fused op like a registry op.
        Like `infer_shapes` on a graph, it records each body node's meta
        (``tensor_meta``, ``shape``, ``dtype``, ``device``), so the nested body
        prints with shapes and the cost model can count its ops.
        """
        env = {}
        inputs = iter(args)
        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
            elif node.op == "call":
                env[node] = node.target.shape_rule(*map_arg(node.args, env.__getitem__),
                                                   **map_arg(node.kwargs, env.__getitem__))
            elif node.op == "output":
                return map_arg(node.args[0], env.__getitem__)
            else:
                raise GraphError(f"{self.name}: the body of a fused op holds only placeholders, calls and "
                                 f"an output, found {node.format_node()}")
            record_meta(node, env[node])
        raise GraphError(f"{self.name}: the body has no output node; end it with body.output(result)")

    # -- plain data: copies, pickles and saved files carry the name and the body only -----
    def __getstate__(self):
        return {"name": self.name, "graph": self.graph}

    def __setstate__(self, state):
        self.__init__(state["name"], state["graph"])

    def to_data(self, save_graph):
        """The fused op as JSON data for `fxkit.save`: its name and its body's nodes."""
        return {"name": self.name, "graph": save_graph(self.graph)}

    @classmethod
    def from_data(cls, data, load_graph):
        """The fused op `to_data` described, for `fxkit.load`.

        Raises:
            GraphError: the name is no identifier, or the body calls anything but registry ops.
        """
        name = data.get("name")
        if type(name) is not str or not is_plain_identifier(name):
            raise GraphError(f"load: a fused op is named {name!r}, which is no identifier; the file is corrupt")
        body = load_graph(data["graph"])
        for node in body.nodes:
            if node.op == "get_attr" or (node.op == "call" and not isinstance(node.target, Op)):
                raise GraphError(f"load: the body of fused op {name} holds {node.format_node()}; a fused body "
                                 f"calls registry ops only, so the file is corrupt")
        return cls(name, body)

    def __repr__(self):
        ops = [n.target.name for n in self.graph.nodes if n.op == "call"]
        return f"FusedOp({self.name}: {', '.join(ops)})"


def group_inputs(members):
    """The values a group of ``members`` reads from outside it, in order of first use: the
    placeholders of its `FusedOp` body and the arguments of its call."""
    inside = set(members)
    return list(dict.fromkeys(used for node in members for used in node.all_input_nodes if used not in inside))


register_target_kind("fused_op", FusedOp)
