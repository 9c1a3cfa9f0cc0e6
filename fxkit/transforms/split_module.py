"""`split_module`: cut a `GraphModule` into one child module per partition.

The result is a parent `GraphModule` whose graph calls the children in
order; every value that crosses partitions becomes an explicit output of the
child computing it and an explicit input of each child reading it. Each child
owns exactly the parameters it uses: a ``get_attr`` lives in the first
partition reading it and is handed to later readers as an ordinary value, so
no parameter is duplicated and none is lost (a submodule with parameters
called from two partitions cannot be split without copying its weights, and
is refused).

Example::

    before (partition_fn: linear -> 0, relu and linear_1 -> 1):
        %x        = placeholder[x]
        %linear   = call[self.a](%x)
        %relu     = call[relu](%linear)
        %linear_1 = call[self.b](%relu)
        return (%linear_1, %linear)

    after, the parent:                          submod_1:
        %x        = placeholder[x]                  %linear   = placeholder[linear]
        %submod_0 = call[self.submod_0](%x)         %relu     = call[relu](%linear)
        %submod_1 = call[self.submod_1](%submod_0)  %linear_1 = call[self.b](%relu)
        return (%submod_1, %submod_0)               return %linear_1
"""
import copy

from fxkit.errors import GraphError
from fxkit.graph import Graph, GraphModule, fetch_attr, map_arg
from fxkit.runtime.registry import get_op

_GETITEM = get_op("getitem")


def split_module(gm, partition_fn, prefix="submod_"):
    """Split ``gm`` into one child `GraphModule` per partition, called in order by a parent.

    Args:
        gm: the module to split (left unchanged).
        partition_fn: ``node -> key`` for every ``call`` node; nodes with equal
            keys form one partition. Keys need no order: partitions run in an
            order that respects the data flow (ties by first appearance).
            ``get_attr`` nodes follow their first reader, placeholders and the
            output stay in the parent.
        prefix: children are named ``<prefix>0``, ``<prefix>1``, ... in call order.

    Returns:
        The parent `GraphModule`; its ``call`` node of each child has the
        partition key in ``meta["partition"]``.

    Raises:
        GraphError: partitions depend on each other both ways (no order can run
            them), ``partition_fn`` gave None, or a parameter would have to live
            in two children.

    Example:
        >>> parent = split_module(gm, lambda node: 0 if node.name < "m" else 1)
        >>> parent(x)   # equals gm(x)
    """
    plan = _Plan(gm, partition_fn)
    children = {}
    parent_graph = Graph()
    value = {}  # original node -> the parent node holding its value
    for node in gm.graph.nodes:
        if node.op == "placeholder" or (node.op == "get_attr" and plan.owner[node] is None):
            value[node] = parent_graph.node_copy(node)
    for index, key in enumerate(plan.order):
        name = f"{prefix}{index}"
        inputs, outputs = plan.inputs[key], plan.outputs[key]
        children[name] = _child(gm, plan.members[key], inputs, outputs, f"{type(gm).__name__}_{name}")
        call = _call_child(parent_graph, name, tuple(value[v] for v in inputs), outputs, value)
        call.meta["partition"] = key
    output = gm.graph.output_node()
    parent_graph.output(map_arg(output.args[0], value.__getitem__) if output.args else None)
    _check_parameters_once(children)
    root = dict(children)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and plan.owner[node] is None:
            root[node.target] = fetch_attr(gm, node.target)
    parent = GraphModule(root, parent_graph, f"{type(gm).__name__}Split")
    parent.training = gm.training
    return parent


class _Plan:
    """Which partition each node is in, the order of partitions, and what crosses between them."""

    def __init__(self, gm, partition_fn):
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
        self.order = _partition_order(graph, self.key, seen)
        rank = {key: i for i, key in enumerate(self.order)}
        self.owner = {}
        for node in graph.nodes:
            if node.op == "call":
                self.owner[node] = self.key[node]
            elif node.op == "get_attr":
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
            self.inputs[key] = sorted(self.inputs[key], key=position.__getitem__)
            self.outputs[key] = sorted(self.outputs[key], key=position.__getitem__)


def _partition_order(graph, key_of, first_seen):
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


def _call_child(graph, name, args, outputs, value):
    """Call child ``name`` in ``graph`` and bind each of ``outputs`` (nodes of the original graph) in
    ``value``: to the call itself when it computes one value, else to a ``getitem`` pick of it
    named after the original node and carrying its meta."""
    call = graph.call(name, args, name=name)
    if len(outputs) == 1:
        value[outputs[0]] = call
        return call
    for i, out in enumerate(outputs):
        picked = graph.call(_GETITEM, (call, i), name=out.name)
        picked.meta = copy.copy(out.meta)
        value[out] = picked
    return call


def _child(gm, members, inputs, outputs, class_name):
    graph = Graph()
    env = {}
    for used in inputs:
        placeholder = graph.placeholder(used.name)
        placeholder.meta = copy.copy(used.meta)
        env[used] = placeholder
    for node in members:
        env[node] = graph.node_copy(node, env.__getitem__)
    results = [env[o] for o in outputs]
    graph.output(results[0] if len(results) == 1 else (tuple(results) if results else None))
    return GraphModule(gm, graph, class_name)


def _check_parameters_once(children):
    owner = {}
    for name, child in children.items():
        tensors = list(child.named_parameters()) + list(child.named_buffers())
        for qualname, tensor in tensors:
            first = owner.setdefault(id(tensor), (name, qualname))
            if first[0] != name:
                raise GraphError(
                    f"split_module: {qualname!r} would be owned by both {first[0]} and {name}: a submodule with "
                    f"parameters or buffers is called from two partitions; put all calls of that module in one "
                    f"partition (or read its weights with get_attr, which is passed between partitions)")
