"""Which nodes a cleanup pass may remove, merge or precompute.

Dead-code elimination, CSE and constant folding all ask the same questions,
answered here once from the op registry (``Op.pure``, ``Op.kind``):

* is a node *pure*: running it twice, or not at all, cannot be told apart?
  A registry op is when ``Op.pure`` says so (random ops, ``setitem`` and
  ``batch_norm``, which updates running statistics in training, are not; nor is a
  call with ``dropout_p`` above 0, see `draws_dropout`); a
  wrapped function is unless it was wrapped as impure; a submodule call is
  when the module does not declare ``_is_impure`` and either it and its
  children are in eval mode, or tracing its ``forward`` through every layer
  records only pure ops (in training ``Dropout`` records a random op and
  ``BatchNorm2d`` fails to trace as it updates its statistics, so both count
  as impure; ``Linear`` is pure in either mode).
* may an impure node *write* its inputs? A random op does not unless called
  with ``inplace=True``; any other impure op, function or submodule may
  (a training-mode submodule is asked through its trace, like above).
* which values may such a write reach? Everything sharing memory with a
  written input: values linked by calls that may return a view of (or the
  very array of) their input. Only elementwise, reduction, matmul and conv
  ops are known to return fresh arrays.
"""
import copy
import weakref

from fxkit.runtime.op import Op
from fxkit.tracer.tracer import Tracer

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
        return target.pure and not draws_dropout(target, node)
    if type(target) is str:
        module = _submodule(gm, target)
        return module is not None and module_effects(module)[0]
    return not getattr(target, "_fxkit_impure", False)


def may_write_inputs(gm, node):
    """True when the call ``node`` may write into the arrays it receives."""
    target = node.target
    if isinstance(target, Op):
        if target.pure:
            return False
        if target.kind == "random":
            arguments = bound_arguments(target, node.args, node.kwargs)
            return arguments is None or arguments.get("inplace", False) is not False
        return True
    if type(target) is str:
        module = _submodule(gm, target)
        return module is None or module_effects(module)[1]
    return bool(getattr(target, "_fxkit_impure", False))


def written_nodes(gm):
    """The nodes of ``gm.graph`` whose values an impure node may write in place.

    Returns:
        A set of nodes: the inputs an impure call may write, everything that
        may alias them, and ``get_attr`` nodes reading the state of a
        submodule whose call may write.
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
    writing_paths = []
    for node in graph.nodes:
        if node.op != "call":
            continue
        if not is_pure(gm, node) and may_write_inputs(gm, node):
            roots.extend(node.all_input_nodes)
            if type(node.target) is str:
                writing_paths.append(node.target + ".")
        if not (isinstance(node.target, Op) and node.target.kind in _FRESH_KINDS):
            for used in node.all_input_nodes:
                union(used, node)
    if writing_paths:
        paths = tuple(writing_paths)
        roots.extend(n for n in graph.nodes if n.op == "get_attr" and n.target.startswith(paths))
    written = {find(n) for n in roots}
    return {n for n in graph.nodes if find(n) in written}


def draws_dropout(op, node):
    """Whether a call of a pure op draws random numbers: a ``dropout_p`` above 0
    (``scaled_dot_product_attention`` in training). Such a call writes nothing, but two
    of them are not one, and removing one changes the random stream."""
    if "dropout_p" not in op.signature.parameters:
        return False
    arguments = bound_arguments(op, node.args, node.kwargs)
    return arguments is None or arguments["dropout_p"] != 0


def bound_arguments(op, args, kwargs):
    """``{parameter: value}`` of a call of ``op``, defaults filled in; None when the call does not bind."""
    try:
        return op.bind(args, kwargs)
    except TypeError:
        return None


_EFFECTS = weakref.WeakKeyDictionary()


def module_effects(module):
    """``(pure, writes_inputs)`` of calling ``module`` (see the module docstring).

    The answer for training mode comes from tracing the module; it is cached
    per module and per train/eval setting of its layers.
    """
    if getattr(module, "_is_impure", False):
        return False, True
    modes = tuple(m.training for m in module.modules())
    if not any(modes):
        return True, False
    cached = _EFFECTS.get(module)
    if cached is None or cached[0] != modes:
        cached = _EFFECTS[module] = (modes, _traced_effects(module))
    return cached[1]


class _ThroughEveryLayer(Tracer):
    def is_leaf_module(self, module, qualname):
        return False


def _traced_effects(module):
    try:
        # NOTE: a shallow copy takes the tensor constants the tracer attaches to its root.
        graph = _ThroughEveryLayer().trace(copy.copy(module))
    except Exception:  # noqa: BLE001  (whatever stops the trace, the module's effects are unknown)
        return False, True
    pure, writes = True, False
    for node in graph.nodes:
        if node.op == "call":
            target = node.target
            if not (target.pure if isinstance(target, Op) else not getattr(target, "_fxkit_impure", False)):
                pure = False
                writes = writes or may_write_inputs(None, node)
    return pure, writes


def _submodule(gm, path):
    try:
        return gm.get_submodule(path)
    except AttributeError:
        return None
