"""Where pipeline stages may end, and the best places to end them.

The units are a graph's ``call`` nodes in topological order; boundary ``b``
lies between ``units[b - 1]`` and ``units[b]``. `crossing_values` says which
values cross each boundary (computed before it, read after it), and
`balanced_cuts` picks the boundaries that minimise the largest stage cost by
dynamic programming: ``best[j][b]``, the smallest largest-stage cost of
splitting the first ``b`` units into ``j`` stages, is the minimum over the
previous boundary ``a`` of ``max(best[j - 1][a], cost(a, b))``. That is exact
(every split of the candidate boundaries is considered) in
``O(k * candidates**2)`` steps; a second pass of the same shape picks, among
the splits reaching the optimum, one sending the fewest bytes.

Example::

    costs  = [4, 1, 1, 4]            boundaries 1, 2, 3 all allowed, k = 2
    cuts   = [2]                     stages [4, 1] and [1, 4]: largest 5 (vs 6 or 9)
"""
from fxkit.errors import GraphError
from fxkit.transforms.cost import nbytes


def crossing_values(graph, units):
    """For each boundary ``b`` (between ``units[b-1]`` and ``units[b]``), the value nodes crossing it.

    A value crosses when it is computed (or is a graph input) before the
    boundary and read after it, the graph's output counting as read at the
    end. A ``get_attr`` counts from its first reader, where it lives.

    Returns:
        A list of ``len(units) + 1`` lists of nodes: entry 0 holds the graph
        inputs read by some unit, the last entry what the output reads.
    """
    position = {u: i for i, u in enumerate(units)}
    end = len(units)
    crossing = [[] for _ in range(end + 1)]
    for node in graph.nodes:
        if node.op == "output" or not node.users:
            continue
        reads = [end if u.op == "output" else position.get(u) for u in node.users]
        reads = [r for r in reads if r is not None]
        if not reads:
            continue
        if node.op == "placeholder":
            start = -1
        elif node.op == "get_attr":
            start = min(reads)
        elif node in position:
            start = position[node]
        else:
            continue
        for b in range(start + 1, max(reads) + 1):
            crossing[b].append(node)
    return crossing


def tensor_bytes(nodes):
    """Bytes of the tensors the value ``nodes`` hold (from their inferred ``meta``)."""
    return sum(nbytes(n.meta.get("tensor_meta")) for n in nodes)


def tensor_count(nodes):
    """How many of the value ``nodes`` hold tensors (Python values such as sizes cost nothing to pass)."""
    return sum(1 for n in nodes if "tensor_meta" in n.meta)


def balanced_cuts(costs, crossing, n_stages, max_crossing=2):
    """The ``n_stages - 1`` cut boundaries minimising the largest stage's cost (exactly).

    Args:
        costs: one number per unit.
        crossing: `crossing_values` of the units (their tensors' ``meta`` give counts and bytes).
        n_stages: the number of stages.
        max_crossing: candidates carry at most this many tensors across; raised
            until there are enough candidates.

    Returns:
        ``(cuts, limit)``: sorted boundaries and the crossing limit used.
    """
    n = len(costs)
    if n_stages > n:
        raise GraphError(f"split_pipeline: {n_stages} stages need at least {n_stages} call nodes; the graph has {n}")
    counts = [tensor_count(c) for c in crossing]
    limit = max_crossing
    candidates = [b for b in range(1, n) if counts[b] <= limit]
    while len(candidates) < n_stages - 1:
        limit = min(counts[b] for b in range(1, n) if counts[b] > limit)
        candidates = [b for b in range(1, n) if counts[b] <= limit]
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    sent = [tensor_bytes(c) for c in crossing]
    ends = candidates + [n]
    best = _min_max_cost(prefix, ends, n_stages)
    return _fewest_bytes(prefix, ends, n_stages, best, sent), limit


def _min_max_cost(prefix, ends, k):
    """The smallest achievable largest-stage cost with ``k`` stages ending at boundaries in ``ends``."""
    inf = float("inf")
    f = {b: prefix[b] for b in ends}  # one stage covering units [0, b)
    for _ in range(k - 1):
        g = {}
        for j, b in enumerate(ends):
            best = inf
            for a in ends[:j]:
                if f[a] == inf:
                    continue
                best = min(best, max(f[a], prefix[b] - prefix[a]))
            g[b] = best
        f = g
    return f[ends[-1]]


def _fewest_bytes(prefix, ends, k, limit, sent):
    """Among splits whose every stage costs at most ``limit``, the one sending the fewest bytes."""
    inf = float("inf")
    f = {b: (0, ()) if prefix[b] <= limit else (inf, ()) for b in ends}
    for _ in range(k - 1):
        g = {}
        for j, b in enumerate(ends):
            best = (inf, ())
            for a in ends[:j]:
                total, cuts = f[a]
                if total == inf or prefix[b] - prefix[a] > limit:
                    continue
                best = min(best, (total + sent[a], cuts + (a,)))
            g[b] = best
        f = g
    return list(f[ends[-1]][1])
