"""`SubgraphMatcher`: find where a pattern graph occurs in a graph.

A pattern is an ordinary graph (usually traced from a function): its
placeholders are wildcards that match any value (a node or a constant, the
same value wherever the placeholder is used), every other node must match a
node with the same opcode, the same target (the same `Op` or function; equal
names for submodule paths and ``get_attr``), the same number of arguments,
the same keyword names and equal constants, argument by argument. Matching
starts from the pattern's returned nodes (the *anchors*) and walks the
arguments upwards, as torch.fx's matcher does.

A match is rejected when a node matched to a pattern node that the pattern
does not return has a user outside the match: replacing the match would take
that value away from the user.
"""
from dataclasses import dataclass, field

from fxkit.errors import GraphError
from fxkit.graph.graph import Graph
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.node import Node, map_aggregate
from fxkit.tracer import symbolic_trace


@dataclass
class Match:
    """One occurrence of the pattern.

    Attributes:
        anchor: the graph node matched to the pattern's first returned node.
        anchors: the graph values matched to each returned pattern value, in the pattern's output order.
        nodes_map: pattern node -> graph node; a placeholder maps to the node or constant it stands for.
        placeholder_nodes: what each pattern placeholder stands for, in placeholder order (None when
            the pattern does not use that placeholder).
        replacements: the nodes `replace_pattern` inserted for this match.
    """

    anchor: Node
    anchors: list
    nodes_map: dict
    placeholder_nodes: list
    replacements: list = field(default_factory=list)

    def matched_nodes(self):
        """The graph nodes matched to pattern nodes other than placeholders, in no particular order."""
        return [g for p, g in self.nodes_map.items() if p.op != "placeholder"]


class SubgraphMatcher:
    """Finds the occurrences of ``pattern`` in graphs.

    Args:
        pattern: a `Graph`, a `GraphModule` or a function (traced with ``symbolic_trace``).
        remove_overlapping: keep only matches sharing no matched node with an
            earlier match (graph order), so they can all be replaced.
        ignore_literals: a constant in the pattern (``x + 1``) matches any constant
            in the same place (``x + 2``), never a node (torch.fx's ``ignore_literals``).

    Attributes:
        pattern: the pattern `Graph`.
        placeholders: its placeholders (the wildcards), in order.
        returned: the values it returns, flattened, in order.
        anchors: the distinct returned nodes, where matching starts.
        nodes: the pattern nodes the returned values depend on (others are ignored).

    Example:
        >>> def pattern(x):
        ...     return x.relu().neg()
        >>> matches = SubgraphMatcher(pattern).match(gm.graph)
        >>> [m.anchor for m in matches]
        [%neg, %neg_1]
    """

    def __init__(self, pattern, remove_overlapping=True, ignore_literals=False):
        self.pattern = pattern_graph(pattern)
        self.remove_overlapping = remove_overlapping
        self.ignore_literals = ignore_literals
        self.placeholders = [n for n in self.pattern.nodes if n.op == "placeholder"]
        output = self.pattern.output_node()
        self.returned = flatten_output(output.args[0] if output.args else None)
        if not self.returned or not all(isinstance(n, Node) and n.op != "placeholder" for n in self.returned):
            raise GraphError(f"SubgraphMatcher: the pattern must return one or more computed nodes, got "
                             f"{output.format_node()}; a pattern returning an input or a constant matches nothing")
        self.anchors = list(dict.fromkeys(self.returned))
        self.nodes = set()
        stack = list(self.anchors)
        while stack:
            node = stack.pop()
            if node not in self.nodes:
                self.nodes.add(node)
                stack.extend(node.all_input_nodes)
        self._internal = [n for n in self.nodes if n.op != "placeholder" and n not in self.anchors]

    def match(self, graph):
        """Every occurrence of the pattern in ``graph``, in graph order of the first anchor.

        Returns:
            A list of `Match`; without overlaps unless ``remove_overlapping=False``.
        """
        matches = []
        taken = set()
        first = self.anchors[0]
        for node in graph.nodes:
            if not _same_operation(first, node):
                continue
            state = _attempt({}, {}, first, node, self.ignore_literals)
            if state is None:
                continue
            for nodes_map, reverse in self._complete(graph, 1, state):
                if self.remove_overlapping:
                    if not taken.isdisjoint(reverse):
                        continue
                    taken.update(reverse)
                matches.append(Match(anchor=node, anchors=[nodes_map[n] for n in self.returned],
                                     nodes_map=nodes_map,
                                     placeholder_nodes=[nodes_map.get(p) for p in self.placeholders]))
                break
        return matches

    def _complete(self, graph, index, state):
        """Yield the ``(nodes_map, reverse)`` states matching anchors ``index`` onwards, each valid."""
        if index == len(self.anchors):
            if self._valid(*state):
                yield state
            return
        anchor = self.anchors[index]
        if anchor in state[0]:
            yield from self._complete(graph, index + 1, state)
            return
        for node in graph.nodes:
            if _same_operation(anchor, node):
                extended = _attempt(dict(state[0]), dict(state[1]), anchor, node, self.ignore_literals)
                if extended is not None:
                    yield from self._complete(graph, index + 1, extended)

    def _valid(self, nodes_map, reverse):
        for p in self.placeholders:
            bound = nodes_map.get(p)
            if isinstance(bound, Node) and bound in reverse:
                return False  # the value would be erased with the match while the replacement reads it
        for p in self._internal:
            if any(user not in reverse for user in nodes_map[p].users):
                return False
        return True


def pattern_graph(pattern):
    """The `Graph` of a pattern given as a Graph, a GraphModule or a function."""
    if isinstance(pattern, Graph):
        return pattern
    if isinstance(pattern, GraphModule):
        return pattern.graph
    if callable(pattern):
        return symbolic_trace(pattern).graph
    raise GraphError(f"a pattern must be a Graph, a GraphModule or a function, got {type(pattern).__name__}")


def _attempt(nodes_map, reverse, pattern_node, node, ignore_literals=False):
    """Match ``pattern_node`` to ``node`` on top of the given maps; the maps, or None."""
    return (nodes_map, reverse) if _match_value(pattern_node, node, nodes_map, reverse, ignore_literals) else None


def _match_value(p, g, nodes_map, reverse, ignore=False):
    if isinstance(p, Node):
        if p in nodes_map:
            bound = nodes_map[p]
            return bound is g if isinstance(bound, Node) or isinstance(g, Node) else _same_constant(bound, g)
        if p.op == "placeholder":
            nodes_map[p] = g
            return True
        if not isinstance(g, Node) or g in reverse or not _same_operation(p, g):
            return False
        nodes_map[p] = g
        reverse[g] = p
        if len(p.args) != len(g.args) or p.kwargs.keys() != g.kwargs.keys():
            return False
        return (all(_match_value(a, b, nodes_map, reverse, ignore) for a, b in zip(p.args, g.args))
                and all(_match_value(v, g.kwargs[k], nodes_map, reverse, ignore) for k, v in p.kwargs.items()))
    if isinstance(g, Node) or type(p) is not type(g):
        return False
    if isinstance(p, dict):
        return p.keys() == g.keys() and all(_match_value(v, g[k], nodes_map, reverse, ignore) for k, v in p.items())
    if type(p) is slice:
        p, g = (p.start, p.stop, p.step), (g.start, g.stop, g.step)
    if isinstance(p, (tuple, list)):  # namedtuples too
        return len(p) == len(g) and all(_match_value(a, b, nodes_map, reverse, ignore) for a, b in zip(p, g))
    return ignore or _same_constant(p, g)


def _same_operation(p, g):
    if p.op != g.op or p.op in ("placeholder", "output"):
        return False
    return p.target is g.target or (type(p.target) is str and p.target == g.target)


def _same_constant(a, b):
    """Equal constants of the same type (``1``, ``1.0`` and ``True`` differ; so do ``0.0`` and ``-0.0``)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return repr(a) == repr(b)
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same_constant(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays: only the very same object matches
        return a is b


def flatten_output(value):
    """The nodes and constants of a graph's output, in order (nested tuples, lists and dicts)."""
    found = []
    map_aggregate(value, found.append)
    return found
