"""`fuse_elementwise`: merge connected elementwise ops into one `FusedOp` call each.

The talk's ``for i in range(10): x = x * x`` becomes one group::

    before:                                   after:
    graph(x):                                 graph(x):
        %x     = placeholder[x]                   %x     = placeholder[x]
        %mul   = call[mul](%x, %x)                %mul_9 = call[fused_0](%x)
        %mul_1 = call[mul](%mul, %mul)            return %mul_9
        ...
        %mul_9 = call[mul](%mul_8, %mul_8)    with fused_0 = graph(x):
        return %mul_9                             %x   = placeholder[x]
                                                  %mul = call[mul](%x, %x)
                                                  ...
                                                  return %mul_9

A group is a maximal connected set of ``call`` nodes of pure registry ops of
kind ``elementwise`` computing tensors (not shape arithmetic like
``x.size(0) * 2``). Groups grow greedily in graph order; a merge is refused
when a path would lead from one part of the group to another through some
other node or group (the fused call could then be placed nowhere). Members
whose values are used outside become the group's outputs: with several, the
fused call returns a tuple and ``getitem`` nodes named after the old members
pick the results. A single-output group's call takes its output's name and
``meta``. Calls that are not pure (`effects.is_pure`: random ops,
``setitem``, dropout modules in training) are barriers: no group spans one,
and they keep their order relative to every other node.
"""
import bisect
import copy
import heapq

from fxkit.errors import GraphError
from fxkit.graph import Graph, fetch_attr
from fxkit.runtime.dtypes import DType
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.effects import is_pure
from fxkit.transforms.fused_op import FusedOp, group_inputs
from fxkit.transforms.pass_base import Pass

_GETITEM = get_op("getitem")
# What a node's meta says about its value (as opposed to where it came from).
_VALUE_META = ("shape", "dtype", "device", "tensor_meta")


class FuseElementwise(Pass):
    """Replace each group of connected elementwise ops by one `FusedOp` call.

    Args:
        min_size: the fewest ops a group needs to be fused. The default
            leaves lone ops alone, as the numpy backend wants (a lone numpy
            ufunc is already one pass); the numba backend fuses them too.

    Example:
        >>> gm = FuseElementwise()(fxkit.symbolic_trace(lstm_cell))
        >>> print(gm.graph)          # the pointwise tail is one fused_0 call
    """

    def __init__(self, min_size=2):
        if type(min_size) is not int or min_size < 1:
            raise ValueError(f"FuseElementwise: min_size must be an int >= 1, got {min_size!r}")
        self.min_size = min_size

    def __call__(self, gm):
        graph = gm.graph
        try:
            graph.lint()
        except GraphError as exc:
            raise GraphError(f"{self.name}: the input graph is malformed:\n{exc}") from exc
        nodes = list(graph.nodes)
        impure = {n for n in nodes if n.op == "call" and not is_pure(gm, n)}
        groups = [g for g in _find_groups(gm, nodes, impure) if len(g) >= self.min_size]
        if groups:
            gm.graph = _rebuild(nodes, groups, impure, _first_free_index(nodes))
        return gm


def fuse_elementwise(gm, min_size=2):
    """Fuse connected elementwise ops of ``gm`` into `FusedOp` calls (see `FuseElementwise`).

    Returns:
        ``gm``, whose graph now calls one `FusedOp` a group.
    """
    return FuseElementwise(min_size)(gm)


# -- finding groups --------------------------------------------------------------------------
def _find_groups(gm, nodes, impure):
    """The groups (lists of nodes in graph order) of fusible nodes, merged greedily in graph order."""
    units = _Units(nodes)
    tensors = {}
    barriers = 0  # impure calls so far: groups never span one
    segment = {}
    for i, node in enumerate(nodes):
        if node in impure:
            barriers += 1
        if not _fusible(gm, node, tensors):
            continue
        segment[i] = barriers
        for used in node.all_input_nodes:
            j = units.index[used]
            if j not in segment or segment[j] != barriers:
                continue
            mine, other = units.find(i), units.find(j)
            if mine != other and not units.path_between(mine, other) and not units.path_between(other, mine):
                units.merge(mine, other)
    groups = {}
    for i in segment:
        groups.setdefault(units.find(i), []).append(nodes[i])
    return list(groups.values())


class _Units:
    """The graph with groups contracted: union-find over node positions.

    Each unit (a root position) knows its first and last member's position and
    the positions its members' users sit at. Merging two units is safe unless
    a path leads from one to the other through a third unit: the contracted
    graph would then have a cycle, and the fused call no valid place.
    """

    def __init__(self, nodes):
        self.index = {node: i for i, node in enumerate(nodes)}
        self.parent = list(range(len(nodes)))
        self.first = list(range(len(nodes)))
        self.last = list(range(len(nodes)))
        self.users = [{self.index[u] for u in node.users} for node in nodes]

    def find(self, i):
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def merge(self, a, b):
        if len(self.users[a]) < len(self.users[b]):
            a, b = b, a
        self.parent[b] = a
        self.first[a] = min(self.first[a], self.first[b])
        self.last[a] = max(self.last[a], self.last[b])
        # Users inside the merged unit lead nowhere: dropping them keeps searches short.
        self.users[a] = {u for u in self.users[a] | self.users[b] if self.find(u) != a}
        self.users[b] = None

    def path_between(self, a, b):
        """Whether a path leads from unit ``a`` through another unit to unit ``b``.

        NOTE: a unit can only lead to ``b`` when one of its members comes before
        one of ``b``'s (graph order is topological), which keeps the search near.
        """
        find, first, users = self.find, self.first, self.users
        last_b = self.last[b]
        todo = [r for r in {find(u) for u in users[a]} if r != a and r != b]
        seen = set(todo)
        while todo:
            x = todo.pop()
            if first[x] >= last_b:
                continue
            for u in users[x]:
                r = find(u)
                if r == b:
                    return True
                if r not in seen and r != a:
                    seen.add(r)
                    todo.append(r)
        return False


def _fusible(gm, node, tensors):
    """A pure elementwise registry op producing a tensor; records what computes tensors."""
    tensors[node] = result = _computes_tensor(gm, node, tensors)
    target = node.target
    return (result and node.op == "call" and isinstance(target, Op) and target.kind == "elementwise"
            and target.pure and target.kernel_template(result_dtype(node)) is not None)


def result_dtype(node):
    """The `DType` of the one tensor ``node`` computes (from its meta), or None."""
    meta = node.meta.get("tensor_meta")
    dtype = getattr(meta, "dtype", None) if meta is not None else node.meta.get("dtype")
    return dtype if isinstance(dtype, DType) else None


def _computes_tensor(gm, node, tensors):
    """Whether ``node``'s value is a tensor (or tensors), from its meta or structurally.

    Shape arithmetic (``x.size(0) * 2``) runs elementwise ops on Python numbers:
    fusing it would put no tensor in a kernel.
    """
    dtype = node.meta.get("dtype")
    if dtype is not None:
        return isinstance(dtype, DType) or (type(dtype) in (tuple, list) and any(isinstance(d, DType)
                                                                                 for d in dtype))
    if node.op == "placeholder":
        return True
    if node.op == "get_attr":
        try:
            return isinstance(fetch_attr(gm, node.target), Tensor)
        except AttributeError:
            return False
    if node.op != "call":
        return False
    target = node.target
    if type(target) is str or isinstance(target, FusedOp):
        return True
    if not isinstance(target, Op):
        return False  # getattr, wrapped functions: may well be shape queries
    if target.kind == "shape":
        return False
    if target.kind in ("elementwise", "view"):
        return any(tensors.get(used, False) for used in node.all_input_nodes)
    return True


def _first_free_index(nodes):
    taken = {n.target.name for n in nodes if n.op == "call" and isinstance(n.target, FusedOp)}
    number = 0
    while f"fused_{number}" in taken:
        number += 1
    return number


# -- rewriting ----------------------------------------------------------------------------------
def _rebuild(nodes, groups, impure, first_index):
    """A new graph with each group as one fused call, in an order respecting every use.

    The units (whole groups, and the nodes outside groups) are scheduled by
    Kahn's algorithm, earliest original position first: untouched stretches
    keep their order, and users of a group's early members that sat before its
    later members now follow the fused call. Each impure call stays after every
    unit that started before it and before every unit that started after it.
    """
    grouped = {node for group in groups for node in group}
    units = list(groups) + [[node] for node in nodes if node not in grouped]
    unit_of = {node: k for k, unit in enumerate(units) for node in unit}
    position = {node: i for i, node in enumerate(nodes)}
    first = [position[unit[0]] for unit in units]
    barriers = [unit_of[n] for n in nodes if n in impure]
    barrier_positions = [first[b] for b in barriers]
    needs = [{unit_of[used] for node in unit for used in node.all_input_nodes} - {k}
             for k, unit in enumerate(units)]
    for k in range(len(units)):
        # NOTE: groups never span a barrier, so a unit's first node places it.
        at = bisect.bisect_left(barrier_positions, first[k])
        if at > 0:
            needs[k].add(barriers[at - 1])
        after = at + (at < len(barriers) and barrier_positions[at] == first[k])
        if after < len(barriers):
            needs[barriers[after]].add(k)
    waiting = [len(n) for n in needs]
    followers = [[] for _ in units]
    for k, needed in enumerate(needs):
        for d in needed:
            followers[d].append(k)
    ready = [(first[k], k) for k in range(len(units)) if waiting[k] == 0]
    heapq.heapify(ready)
    new = Graph()
    env = {}
    number = first_index
    done = 0
    while ready:
        _, k = heapq.heappop(ready)
        unit = units[k]
        if unit[0] in grouped:
            _emit_group(new, unit, env, f"fused_{number}")
            number += 1
        else:
            env[unit[0]] = new.node_copy(unit[0], env.__getitem__)
        done += 1
        for f in followers[k]:
            waiting[f] -= 1
            if waiting[f] == 0:
                heapq.heappush(ready, (first[f], f))
    if done != len(units):
        raise GraphError("fuse_elementwise: the groups found leave no valid node order (a bug in the pass); "
                         "run with min_size larger than any group to skip fusion, and report the graph")
    return new


def _emit_group(new, members, env, name):
    """Add the call of a `FusedOp` computing ``members`` (and getitems for several results)."""
    inside = set(members)
    inputs = group_inputs(members)
    # Unused members stay results: dropping them is dead-code elimination's job.
    outputs = [n for n in members if not n.users or any(u not in inside for u in n.users)]
    body = Graph()
    body_env = {}
    for used in inputs:
        placeholder = body.placeholder(used.name)
        placeholder.meta = {k: v for k, v in used.meta.items() if k in _VALUE_META}
        body_env[used] = placeholder
    for node in members:
        body_env[node] = body.node_copy(node, body_env.__getitem__)
    results = [body_env[n] for n in outputs]
    body.output(results[0] if len(results) == 1 else tuple(results))
    fused = FusedOp(name, body)
    args = tuple(env[used] for used in inputs)
    if len(outputs) == 1:
        call = new.call(fused, args, name=outputs[0].name)
        call.meta = copy.copy(outputs[0].meta)
        env[outputs[0]] = call
        return
    call = new.call(fused, args, name=f"{name}_out")
    call.meta = {k: v for k, v in members[-1].meta.items() if k not in _VALUE_META}
    for key in _VALUE_META:
        values = [n.meta.get(key) for n in outputs]
        if all(v is not None for v in values):
            call.meta[key] = tuple(values)
    for i, node in enumerate(outputs):
        pick = new.call(_GETITEM, (call, i), name=node.name)
        pick.meta = copy.copy(node.meta)
        env[node] = pick
