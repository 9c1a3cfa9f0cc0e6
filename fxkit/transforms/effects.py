"""Which nodes a cleanup pass may remove, merge or precompute.

Dead-code elimination, CSE and constant folding all ask the same two
questions, answered here once from the op registry (``Op.pure``):

* is a node *pure*: running it twice, or not at all, cannot be told apart?
  A registry op is when ``Op.pure`` says so (random ops, ``setitem`` and
  ``batch_norm``, which updates running statistics in training, are not); a
  submodule call is when the module does not declare ``_is_impure`` and it and
  its children are in eval mode (in training a layer may draw random numbers,
  like ``Dropout``, or update state, like ``BatchNorm2d``); a wrapped function
  is unless it was wrapped as impure.
* may a node's value be *written* by an impure node? Every input of an impure
  call counts as possibly written, and so does everything sharing memory with
  it: values linked by calls that may return a view of (or the very array of)
  their input. Only elementwise, reduction, matmul and conv ops are known to
  return fresh arrays.
"""
from fxkit.runtime.op import Op

# Op kinds whose results never share memory with their inputs.
_FRESH_KINDS = frozenset(("elementwise", "reduction", "matmul", "conv"))


def is_pure(gm, node):
    """True when ``node`` may be removed, merged with an equal node or precomputed.

    Args:
        gm: the module owning the graph (submodule calls are looked up in it).
        node: a node of ``gm.graph``.
    """
    if node.op == "get_attr":
        return True
    if node.op != "call":
        return False
    target = node.target
    if isinstance(target, Op):
        return target.pure
    if type(target) is str:
        try:
            module = gm.get_submodule(target)
        except AttributeError:
            return False
        if getattr(module, "_is_impure", False):
            return False
        return not any(m.training for m in module.modules())
    return not getattr(target, "_fxkit_impure", False)


def written_nodes(gm):
    """The nodes of ``gm.graph`` whose values an impure node may write in place.

    Returns:
        A set of nodes: the inputs of impure calls, everything that may alias
        them, and ``get_attr`` nodes reading the state of an impure submodule.
    """
    graph = gm.graph
    parent = {}

    def find(n):
        root = n
        while root in parent:
            root = parent[root]
        while n is not root:
            following = parent[n]
            parent[n] = root
            n = following
        return root

    def union(a, b):
        a, b = find(a), find(b)
        if a is not b:
            parent[a] = b

    roots = []
    impure_paths = []
    for node in graph.nodes:
        if node.op != "call":
            continue
        if not is_pure(gm, node):
            roots.extend(node.all_input_nodes)
            if type(node.target) is str:
                impure_paths.append(node.target + ".")
        if not (isinstance(node.target, Op) and node.target.kind in _FRESH_KINDS):
            for used in node.all_input_nodes:
                union(used, node)
    if impure_paths:
        roots.extend(n for n in graph.nodes
                     if n.op == "get_attr" and any(n.target.startswith(p) for p in impure_paths))
    written = {find(n) for n in roots}
    return {n for n in graph.nodes if find(n) in written}
