"""`replace_pattern`: rewrite every occurrence of a pattern with a replacement."""
from fxkit.errors import GraphError
from fxkit.graph.attributes import assign_attr, fetch_attr
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.node import Node, map_arg
from fxkit.runtime.nn.module import Module
from fxkit.tracer import symbolic_trace
from fxkit.transforms.subgraph_matcher import SubgraphMatcher, flatten_output


def replace_pattern(gm, pattern, replacement):
    """Replace each non-overlapping occurrence of ``pattern`` in ``gm`` with ``replacement``.

    Both are ordinary fxkit functions (or GraphModules) taking the same number
    of arguments: the pattern's arguments are wildcards (see `SubgraphMatcher`),
    and the replacement is called on whatever each one matched. Its returned
    values take the place of the pattern's, in order. A candidate whose
    internal value (one the pattern computes but does not return) is used
    outside it is not a match. New nodes take the user's source line of the
    node they replace, and the node standing for a returned value takes over
    its ``meta``. Attributes and submodules the replacement reads are copied
    into ``gm`` (renamed when the name is taken by something else).

    Example::

        def pattern(x):                 def replacement(x):
            return x.neg().relu()           return (-x).clamp(min=0)

        before:                                 after:
            %x    = placeholder[x]                  %x     = placeholder[x]
            %neg  = call[neg](%x)                   %neg_1 = call[neg](%x)
            %relu = call[relu](%neg)                %clamp = call[clamp](%neg_1, min=0)
            return %relu                            return %clamp

    Args:
        gm: the `GraphModule` to rewrite in place.
        pattern: the function (or GraphModule) whose graph is looked for.
        replacement: the function (or GraphModule) put in its place.

    Returns:
        The list of `Match` objects replaced, each with its ``nodes_map``
        (pattern node -> graph node) and ``replacements`` (the new nodes).
    """
    return replace_pattern_with_filters(gm, pattern, replacement)


def replace_pattern_with_filters(gm, pattern, replacement, match_filters=None, ignore_literals=False):
    """`replace_pattern`, keeping only the matches every filter accepts (torch.fx's function of that name).

    Example::

        def only_after_a_placeholder(match, graph, pattern_graph):
            return all(isinstance(n, Node) and n.op == "placeholder" for n in match.placeholder_nodes)

        replace_pattern_with_filters(gm, pattern, replacement, [only_after_a_placeholder])

    Args:
        gm: the `GraphModule` to rewrite in place.
        pattern: the function (or GraphModule) whose graph is looked for.
        replacement: the function (or GraphModule) put in its place.
        match_filters: callables ``filter(match, graph, pattern_graph) -> bool``
            (a `Match`, the graph searched, the pattern's graph); a match is
            replaced only when every filter returns True.
        ignore_literals: constants in the pattern match any constant in the same
            place (``x + 1`` matches ``x + 2``); the replacement keeps its own.

    Returns:
        The list of `Match` objects replaced.
    """
    matcher = SubgraphMatcher(pattern, ignore_literals=ignore_literals)
    filters = list(match_filters or ())
    replacement_gm = _as_module(replacement)
    source = replacement_gm.graph
    inputs = [n for n in source.nodes if n.op == "placeholder"]
    if len(inputs) != len(matcher.placeholders):
        raise GraphError(f"replace_pattern: the pattern takes {len(matcher.placeholders)} arguments and the "
                         f"replacement {len(inputs)}; give them the same arguments in the same order")
    output = source.output_node()
    returns = flatten_output(output.args[0] if output.args else None)
    if len(returns) != len(matcher.returned):
        raise GraphError(f"replace_pattern: the pattern returns {len(matcher.returned)} values and the "
                         f"replacement {len(returns)}; return one value for each of the pattern's")
    for pattern_input, replacement_input in zip(matcher.placeholders, inputs):
        if replacement_input.users and pattern_input not in matcher.nodes:
            raise GraphError(f"replace_pattern: the replacement reads its argument {replacement_input.name!r}, "
                             f"but the pattern never uses its argument {pattern_input.name!r} in that place, "
                             f"so no match says what it is; use it in the pattern or drop it from the replacement")
    graph = gm.graph
    replaced = {}
    targets = {}
    applied = []
    for match in matcher.match(graph):
        if not all(keep(match, graph, matcher.pattern) for keep in filters):
            continue
        if _apply(gm, match, matcher, replacement_gm, inputs, replaced, targets):
            applied.append(match)
    if applied:
        gm.delete_all_unused_submodules()
    return applied


def _apply(gm, match, matcher, replacement_gm, inputs, replaced, targets):
    """Insert the replacement for ``match`` and erase the matched nodes; False when it cannot be placed.

    ``replaced`` maps the erased nodes to what took their place (later matches
    may have bound them); ``targets`` memoises where the replacement's
    attributes live in ``gm``.
    """
    graph = gm.graph
    bound = [_current(match.nodes_map.get(p), replaced) for p in matcher.placeholders]
    matched = match.matched_nodes()
    matched_set = set(matched)
    order = {n: i for i, n in enumerate(graph.nodes)}
    anchors = [match.nodes_map[a] for a in matcher.anchors]
    last = max(anchors, key=order.__getitem__)
    outside = [u for a in anchors for u in a.users if u not in matched_set]
    insert_at = min(outside + [last], key=order.__getitem__)
    if any(isinstance(b, Node) and order[b] >= order[insert_at] for b in bound):
        return False  # a returned value is used before an input of the match is computed
    env = {placeholder: value for placeholder, value, p in zip(inputs, bound, matcher.placeholders)
           if p in match.nodes_map}
    stack = last.meta.get("stack")
    made = []
    with graph.inserting_before(insert_at):
        for node in replacement_gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                results = flatten_output(map_arg(node.args[0] if node.args else None, env.__getitem__))
                break
            target = node.target
            if type(target) is str:
                if node not in targets:
                    targets[node] = _install(gm, replacement_gm, node)
                target = targets[node]
            new = graph.create_node(node.op, target, map_arg(node.args, env.__getitem__),
                                    map_arg(node.kwargs, env.__getitem__), name=node.name)
            if stack is not None:
                new.meta["stack"] = stack
            env[node] = new
            made.append(new)
    made_set = set(made)
    for pattern_node, result in zip(matcher.returned, results):
        old = match.nodes_map[pattern_node]
        if isinstance(result, Node) and result in made_set:
            result.meta.update(old.meta)
        if old in replaced:  # a value the pattern returns twice, replaced already
            continue
        old.replace_all_uses_with(result)
        replaced[old] = result
    for node in sorted(matched, key=order.__getitem__, reverse=True):
        graph.erase_node(node)
    match.replacements = made
    return True


def _current(value, replaced):
    """``value``, followed through earlier replacements that took its place."""
    while isinstance(value, Node) and value in replaced:
        value = replaced[value]
    return value


def _as_module(replacement):
    if isinstance(replacement, GraphModule):
        return replacement
    if callable(replacement):
        return symbolic_trace(replacement)
    raise GraphError(f"replace_pattern: the replacement must be a function or a GraphModule, "
                     f"got {type(replacement).__name__}")


def _install(gm, replacement_gm, node):
    """The path in ``gm`` holding what ``node`` reads from the replacement module; copied in when missing."""
    path = node.target
    value = replacement_gm.get_submodule(path) if node.op == "call" else fetch_attr(replacement_gm, path)
    try:
        existing = gm.get_submodule(path) if node.op == "call" else fetch_attr(gm, path)
    except AttributeError:
        existing = None
    if existing is value:
        return path
    if existing is not None or not (isinstance(value, Module) and gm.add_submodule(path, value)):
        base = path.replace(".", "_")
        path, i = base, 1
        while hasattr(gm, path):
            path, i = f"{base}_{i}", i + 1
        assign_attr(gm, path, value)
    return path
