"""`FuseRows`: a softmax, log_softmax or layer_norm and its elementwise neighbours become one row group.

Runs after `fxkit.transforms.FuseElementwise`. Each call of a row op (one
`fxkit.codegen.numba_reduction.ROW_OPS` reduces over its input's trailing
dimension(s)) becomes a `FusedOp` whose body holds the row op, the
elementwise group (or op) computing its input when nothing else reads that
value, and the elementwise group (or op) that is its only user; the numba
backend compiles each such group to one row kernel. Attention scores::

    before:                                          after:
    %add     = call[fused_2](%bmm, %mask)            %softmax = call[fused_2](%bmm, %mask)
    %softmax = call[softmax](%add, dim=-1)
                                                     with fused_2 = graph(bmm, mask):
    with fused_2 = graph(bmm, mask):                     %mul     = call[mul](%bmm, 0.125)
        %mul = call[mul](%bmm, 0.125)                    %add     = call[add](%mul, %mask)
        %add = call[add](%mul, %mask)                    %softmax = call[softmax](%add, dim=-1)
        return %add                                      return %softmax

A neighbour joins only when its tensor operands are, over the row
dimensions, either full or broadcast (a value a row), its result has the
row op's shape, and no impure node (``setitem``, a random op) lies between:
the group runs where its last node was, and nothing it reads may change in
between. The last node of the group is turned into the fused call, so the
group keeps that node's name and meta.
"""
import copy

from fxkit.codegen.numba_reduction import ROW_OPS, row_layout, row_node
from fxkit.graph import Graph
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op
from fxkit.transforms import Pass
from fxkit.transforms.fused_op import FusedOp, group_inputs

_FLOATS = ("float32", "float64")


class FuseRows(Pass):
    """Group each row op with its elementwise producer and consumer (see the module docstring)."""

    name = "fuse_rows"

    def __call__(self, gm):
        graph = gm.graph
        taken = {n.target.name for n in graph.nodes if n.op == "call" and isinstance(n.target, FusedOp)}
        number = 0
        for row in list(graph.nodes):
            if row.op != "call" or row.target not in ROW_OPS:
                continue
            source = _meta(row.args[0]) if row.args else None
            if not isinstance(source, TensorMeta) or source.dtype.name not in _FLOATS:
                continue
            k = ROW_OPS[row.target].row_dims(row, source)
            if k is None:
                continue
            producer = _producer(row, source.shape, k)
            consumer = _consumer(row, source.shape, k)
            absorbed = [n.target.name for n in (producer, consumer) if n is not None and isinstance(n.target, FusedOp)]
            if absorbed:
                name = absorbed[0]  # the group it grows out of keeps its name
            else:
                while f"fused_{number}" in taken:
                    number += 1
                name = f"fused_{number}"
                taken.add(name)
            _fuse(graph, producer, row, consumer, name)
        return gm


def fuse_rows(gm):
    """Group each row op of ``gm`` with its elementwise neighbours (see `FuseRows`); returns ``gm``."""
    return FuseRows()(gm)


def _meta(value):
    meta = getattr(value, "meta", None)
    return meta.get("tensor_meta") if isinstance(meta, dict) else None


def _elementwise(node):
    """A call computing one tensor elementwise: a pure templated op, or a single-output elementwise group."""
    if node.op != "call" or not isinstance(_meta(node), TensorMeta):
        return False
    target = node.target
    if isinstance(target, FusedOp):
        return target.num_outputs == 1 and row_node(target.graph) is None
    return (isinstance(target, Op) and target.kind == "elementwise" and target.pure
            and target.kernel_template(_meta(node).dtype) is not None)


def _fits(node, shape, k, skip=None):
    """Whether every tensor ``node`` reads (but ``skip``) is full or broadcast over the row dims."""
    shapes = []
    for used in node.all_input_nodes:
        if used is skip:
            continue
        meta = _meta(used)
        if isinstance(meta, TensorMeta):
            shapes.append(meta.shape)
        elif meta is None and used.op != "get_attr":
            return False  # unknown value: leave the node alone
    return row_layout(shape, k, shapes)


def _pure_between(first, last):
    node = first.next
    while node is not last:
        if node.op == "call" and node.is_impure():
            return False
        node = node.next
    return True


def _producer(row, shape, k):
    source = row.args[0]
    if (hasattr(source, "users") and len(source.users) == 1 and _elementwise(source) and _fits(source, shape, k)
            and _pure_between(source, row)):
        return source
    return None


def _consumer(row, shape, k):
    if len(row.users) != 1:
        return None
    (user,) = row.users
    meta = _meta(user)
    if (_elementwise(user) and meta.shape == tuple(shape) and _fits(user, shape, k, skip=row)
            and _pure_between(row, user)):
        return user
    return None


def _fuse(graph, producer, row, consumer, name):
    members = [n for n in (producer, row, consumer) if n is not None]
    inputs = group_inputs(members)
    body = Graph()
    env = {}
    for used in inputs:
        placeholder = env[used] = body.placeholder(used.name)
        placeholder.meta = copy.copy(used.meta)
    for node in members:
        if isinstance(node.target, FusedOp):
            inner = node.target.graph
            values = dict(zip([p for p in inner.nodes if p.op == "placeholder"],
                              [env[a] for a in node.args]))
            env[node] = body.graph_copy(inner, values)
        else:
            env[node] = body.node_copy(node, env.__getitem__)
    body.output(env[members[-1]])
    # NOTE: the last member becomes the fused call, keeping its name, meta, users and position
    # (every input of the group is defined before it).
    last = members[-1]
    last.target = FusedOp(name, body)
    last.args = tuple(inputs)
    last.kwargs = {}
    for node in reversed(members[:-1]):
        graph.erase_node(node)
