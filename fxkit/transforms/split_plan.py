"""What `split_module` and `partition_by_support` share: which partition runs when, and how a child
module is built and called.

`SplitPlan` assigns nodes to partitions and finds what crosses between them; `partition_order`
schedules partitions after those they read; `build_child` makes a partition's `GraphModule`;
`call_child` calls it from the parent and binds the values it returns.
"""
import copy

from fxkit.errors import GraphError
from fxkit.graph import Graph, GraphModule
from fxkit.runtime.registry import get_op

_GETITEM = get_op("getitem")


class SplitPlan:
    """Which partition each node is in, the order of partitions, and what crosses between them.

    ``attrs_in_parent``: every ``get_attr`` stays in the parent and is handed to the partitions
    reading it (torch.fx's rule), instead of living in the first partition reading it.
    ``inputs_in_use_order``: a partition's inputs come in the order its nodes first read them
    (torch.fx's), instead of graph order.
    """

    def __init__(self, gm, partition_fn, attrs_in_parent=False, inputs_in_use_order=False):
        graph = gm.graph
        self.key = {}
        seen = {}
        for node in graph.nodes:
            if node.op == "call":
                key = partition_fn(node)
                if key is None:
                    raise GraphError(f"split_module: partition_fn returned None for {node.format_node()}; "
                                     f"it must give every call node a partition key")
                self.key[node] = key
                seen.setdefault(key, len(seen))
        self.order = partition_order(graph, self.key, seen)
        rank = {key: i for i, key in enumerate(self.order)}
        self.owner = {}
        for node in graph.nodes:
            if node.op == "call":
                self.owner[node] = self.key[node]
            elif node.op == "get_attr" and not attrs_in_parent:
                readers = [self.key[u] for u in node.users if u.op == "call"]
                self.owner[node] = min(readers, key=rank.__getitem__) if readers else None
            else:
                self.owner[node] = None
        self.members = {key: [] for key in self.order}
        self.inputs = {key: {} for key in self.order}
        self.outputs = {key: {} for key in self.order}
        for node in graph.nodes:
            mine = self.owner[node]
            if mine is not None:
                self.members[mine].append(node)
            for used in node.all_input_nodes:
                theirs = self.owner[used]
                if theirs == mine and mine is not None:
                    continue
                if mine is not None:
                    self.inputs[mine][used] = None
                if theirs is not None:
                    self.outputs[theirs][used] = None
        # Inputs and outputs in graph order, so a child's signature reads like the code it came from.
        position = {node: i for i, node in enumerate(graph.nodes)}
        for key in self.order:
            self.inputs[key] = list(self.inputs[key]) if inputs_in_use_order else \
                sorted(self.inputs[key], key=position.__getitem__)
            self.outputs[key] = sorted(self.outputs[key], key=position.__getitem__)


def partition_order(graph, key_of, first_seen):
    """Partitions in an order where each runs after those it reads from."""
    needs = {key: {} for key in first_seen}
    example = {}
    for node, key in key_of.items():
        for used in node.all_input_nodes:
            other = key_of.get(used)
            if other is not None and other != key:
                needs[key][other] = None
                example.setdefault((other, key), (used, node))
    order, done = [], set()
    while len(order) < len(needs):
        ready = [k for k in needs if k not in done and all(d in done for d in needs[k])]
        if not ready:
            raise _cycle_error(needs, example, done)
        nxt = min(ready, key=first_seen.__getitem__)
        order.append(nxt)
        done.add(nxt)
    return order


def _cycle_error(needs, example, done):
    """Every partition left waits on another one left: follow the waits round the cycle."""
    path = [next(k for k in needs if k not in done)]
    while True:
        waits_on = next(d for d in needs[path[-1]] if d not in done)
        if waits_on in path:
            cycle = path[path.index(waits_on):] + [waits_on]
            break
        path.append(waits_on)
    reads = []
    for reader, source in zip(cycle, cycle[1:]):
        used, node = example[(source, reader)]
        reads.append(f"{node.format_node()} (partition {reader!r}) reads %{used.name} (partition {source!r})")
    return GraphError(f"split_module: partitions {' -> '.join(repr(k) for k in cycle)} wait on each other in "
                      f"a cycle, so no order can run them: " + "; ".join(reads)
                      + "; give nodes partition keys that follow the data flow")


def call_child(graph, name, args, outputs, value, tuple_return=False):
    """Call child ``name`` in ``graph`` and bind each of ``outputs`` (nodes of the original graph) in
    ``value``: to the call itself when it computes one value (and ``tuple_return`` is off), else to a
    ``getitem`` pick of it named after the original node and carrying its meta."""
    call = graph.call(name, args, name=name)
    if len(outputs) == 1 and not tuple_return:
        value[outputs[0]] = call
        return call
    for i, out in enumerate(outputs):
        picked = graph.call(_GETITEM, (call, i), name=out.name)
        picked.meta = copy.copy(out.meta)
        value[out] = picked
    return call


def build_child(gm, members, inputs, outputs, class_name, input_names=None, shared_modules=None,
                tuple_return=False, module_attrs=()):
    """The `GraphModule` of one partition: a placeholder per input, copies of ``members``, its outputs.

    Args:
        input_names: the placeholders' names (default: the names of the nodes they stand for).
        shared_modules: when given, a dict this fills with ``{name in the child: qualified name in gm}``
            of the submodules the members call; the child calls each under that flat name
            (``layer1.0`` -> ``layer1_0``) and holds gm's module object itself, as torch.fx's
            split_module does. Otherwise the child copies what its members read from ``gm``.
        tuple_return: return a tuple even for one value.
        module_attrs: ``get_attr`` nodes of submodules the members read as values; the child reads
            each with a ``get_attr`` of its own after its placeholders (with ``shared_modules``).
    """
    graph = Graph()
    env = {}
    for i, used in enumerate(inputs):
        placeholder = graph.placeholder(used.name if input_names is None else input_names[i])
        placeholder.meta = copy.copy(used.meta)
        env[used] = placeholder
    root = gm if shared_modules is None else {}
    for used in module_attrs:
        local = used.target.replace(".", "_")
        env[used] = graph.get_attr(local, name=used.name)
        env[used].meta = copy.copy(used.meta)
        shared_modules[local] = used.target
        root[local] = gm.get_submodule(used.target)
    for node in members:
        env[node] = copied = graph.node_copy(node, env.__getitem__)
        if shared_modules is not None and node.op == "call" and type(node.target) is str:
            copied.target = node.target.replace(".", "_")
            shared_modules[copied.target] = node.target
            root[copied.target] = gm.get_submodule(node.target)
    results = [env[o] for o in outputs]
    if tuple_return:
        graph.output(tuple(results))
    else:
        graph.output(results[0] if len(results) == 1 else (tuple(results) if results else None))
    return GraphModule(root, graph, class_name)
