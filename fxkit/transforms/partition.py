"""`partition_by_support`: gather the nodes a backend supports into submodules it can run whole.

A delegate backend (onnxruntime, a vendor runtime) runs some ops and not
others. ``partition_by_support(gm, is_supported)`` groups the supported
``call`` nodes into the largest connected sub-graphs that keep the graph
acyclic, as torch.fx's capability-based partitioner does: walking the nodes
in order, each supported node joins the partitions of the supported nodes it
reads, unless the merged partition would both feed and read another part of
the graph (a path leaving it and entering it again, through an unsupported
node or another partition), which no order could run. Each partition becomes
a child `GraphModule` named ``supported_<i>``; the parent calls them in an
order that respects the data flow, with the unsupported nodes between them.
A backend then lowers each child whole and runs the parent's other nodes
itself.

Example::

    before (wrapped function ``py_fn`` unsupported):      after, the parent:
        %x      = placeholder[x]                              %x           = placeholder[x]
        %relu   = call[relu](%x)                              %supported_0 = call[self.supported_0](%x)
        %py_fn  = call[py_fn](%relu)                          %py_fn       = call[py_fn](%supported_0)
        %tanh   = call[tanh](%py_fn)                          %supported_1 = call[self.supported_1](%py_fn)
        return %tanh                                          return %supported_1

Nodes keep their ``meta`` (source lines, shapes) in the children; the call of
each child carries the meta of the value it returns (when one) and its index
in ``meta["partition"]``, so ``print(parent)``, `fxkit.draw` (a cluster per
partition) and ``fxkit summary`` show the partitions.
"""
import itertools

from fxkit.graph import Graph, GraphModule, fetch_attr, map_arg
# NOTE: split_module's scheduling and child construction are the same problem; they are shared.
from fxkit.transforms.split_plan import build_child, call_child, partition_order


def partition_by_support(gm, is_supported, prefix="supported_"):
    """Group the ``call`` nodes ``is_supported`` accepts into child modules (see the module docstring).

    Args:
        gm: the module to partition (left unchanged).
        is_supported: ``node -> bool`` for each ``call`` node of ``gm``.
        prefix: children are named ``<prefix>0``, ``<prefix>1``, ... in call order.

    Returns:
        A `GraphModule` computing what ``gm`` computes, whose graph calls one
        child per partition and keeps the unsupported nodes as they were.

    Example:
        >>> parent = partition_by_support(gm, lambda node: node.target is not my_python_fn)
        >>> [name for name, _ in parent.named_children()]
        ['supported_0', 'supported_1']
    """
    nodes = list(gm.graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    groups = _Groups(position)
    for node in nodes:
        if node.op == "call" and is_supported(node):
            groups.add(node)
    return _build(gm, nodes, position, groups, prefix)


class _Groups:
    """Partitions being grown: node -> partition id, partition id -> members."""

    def __init__(self, position):
        self.position = position
        self.part = {}
        self.members = {}
        self.ids = itertools.count()

    def add(self, node):
        """Start a partition of ``node``, then merge it with each partition it reads from that allows it."""
        pid = next(self.ids)  # NOTE: not len(members): merges remove partitions
        self.part[node] = pid
        self.members[pid] = [node]
        for used in node.all_input_nodes:
            other = self.part.get(used)
            mine = self.part[node]
            if other is not None and other != mine and not self._cycle(mine, other, self.position[node]):
                self._merge(mine, other)

    def _merge(self, a, b):
        keep, gone = (a, b) if a < b else (b, a)
        for node in self.members.pop(gone):
            self.part[node] = keep
            self.members[keep].append(node)

    def _cycle(self, a, b, last):
        """Whether a path leaves partitions ``a`` and ``b`` merged and comes back into them.

        A path through a partition may enter it at one member and leave at
        another (the partition runs as one call), so reaching a member reaches
        all of them. Nodes after ``last`` (the newest node, the latest member
        of both) reach only later nodes: the search stops there.
        """
        union = set(self.members[a]) | set(self.members[b])
        seen, stack = set(), []
        for member in union:
            stack.extend(u for u in member.users if u not in union)
        while stack:
            node = stack.pop()
            if node in seen or self.position[node] > last:
                continue
            if node in union:
                return True
            seen.add(node)
            pid = self.part.get(node)
            group = self.members[pid] if pid is not None else (node,)
            for member in group:
                seen.add(member)
                stack.extend(member.users)
        return False


def _build(gm, nodes, position, groups, prefix):
    """The parent module: children for the partitions, copies of everything else, in a runnable order."""
    key_of, first_seen = {}, {}
    for node in nodes:
        if node.op == "call":
            pid = groups.part.get(node)
            key = ("partition", pid) if pid is not None else ("node", node.name)
            key_of[node] = key
            first_seen.setdefault(key, position[node])
    order = partition_order(gm.graph, key_of, first_seen)
    members = {("partition", pid): sorted(m, key=position.__getitem__) for pid, m in groups.members.items()}
    by_name = {node.name: node for node in nodes}
    graph = Graph()
    value = {}
    children = {}
    for node in nodes:
        if node.op == "placeholder":
            value[node] = graph.node_copy(node)
    for key in order:
        if key[0] == "node":
            node = by_name[key[1]]
            for used in node.all_input_nodes:
                _ensure_attr(graph, value, used)
            value[node] = graph.node_copy(node, value.__getitem__)
            continue
        name = f"{prefix}{len(children)}"
        inside = members[key]
        attrs = {u: None for n in inside for u in n.all_input_nodes if u.op == "get_attr"}
        body = sorted(attrs, key=position.__getitem__) + inside
        in_set = set(body)
        inputs = {u: None for n in inside for u in n.all_input_nodes if u not in in_set}
        outputs = [n for n in inside if any(u not in in_set for u in n.users)]
        inputs = sorted(inputs, key=position.__getitem__)
        child = build_child(gm, body, inputs, outputs, f"{type(gm).__name__}_{name}")
        children[name] = child
        call = call_child(graph, name, tuple(value[u] for u in inputs), outputs, value)
        if len(outputs) == 1:
            call.meta.update({k: v for k, v in outputs[0].meta.items() if k != "partition"})
        call.meta["partition"] = len(children) - 1
    output = gm.graph.output_node()
    if output.args:
        for used in output.all_input_nodes:
            _ensure_attr(graph, value, used)
    graph.output(map_arg(output.args[0], value.__getitem__) if output.args else None)
    root = dict(children)
    for node in graph.nodes:
        if node.op == "get_attr":
            root[node.target] = fetch_attr(gm, node.target)
        elif node.op == "call" and type(node.target) is str and node.target not in children:
            root[node.target] = gm.get_submodule(node.target)
    parent = GraphModule(root, graph, f"{type(gm).__name__}Partitioned")
    parent.training = gm.training
    return parent


def _ensure_attr(graph, value, node):
    """Copy a ``get_attr`` read outside the partitions into the parent (once)."""
    if node.op == "get_attr" and node not in value:
        value[node] = graph.node_copy(node)
