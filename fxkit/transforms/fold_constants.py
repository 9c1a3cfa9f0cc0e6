"""`fold_constants`: precompute what depends only on the module's attributes and constants."""
from fxkit.graph.attributes import fetch_attr
from fxkit.graph.graph import Graph
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.interpreter import Interpreter, node_error
from fxkit.runtime.autograd.autograd_meta import write_count
from fxkit.runtime.autograd.grad_mode import no_grad
from fxkit.runtime.device import Device
from fxkit.runtime.dtypes import DType
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.dead_code import remove_unused_attributes
from fxkit.transforms.effects import is_pure, written_nodes
from fxkit.transforms.pass_base import Pass

_INLINE_ATOMS = (bool, int, float, str, type(None), DType, Device)
PREFIX = "_folded_constant_"


class FoldConstants(Pass):
    """Evaluate, once, every sub-graph that reads only ``get_attr``s and constants.

    A pure call whose inputs are all constant is constant; ``get_attr`` nodes
    are, unless an impure node may write the attribute. Each constant value the
    rest of the graph reads becomes one attribute registered on the module
    (``_folded_constant_0``, ``_folded_constant_1``, ...) read by a ``get_attr``
    that takes over the folded node's ``meta``; Python values (a ``size()``,
    a dtype) are written into their users' arguments instead. Random and other
    impure ops are never folded, and a value an impure node may write in place
    is not either.

    The values are computed with the runtime when the pass runs. Each folded
    tensor's recipe (the sub-graph and the tensors it read) is kept in
    ``gm.folded_constants`` (a list of `FoldedConstant`), so code that runs the
    module after its parameters changed (an optimizer step) can recompute them
    with `FoldedConstant.refresh`, as `fxkit.compile` does.

    Example::

        before:                                      after:
            %x   = placeholder[x]                        %x   = placeholder[x]
            %w   = get_attr[w]                           %_folded_constant_0 = get_attr[_folded_constant_0]
            %t   = call[t](%w)                           %mm  = call[matmul](%x, %_folded_constant_0)
            %mul = call[mul](%t, 2.0)                    return %mm
            %mm  = call[matmul](%x, %mul)
            return %mm                               (``w`` is deleted; ``_folded_constant_0`` = (w.t() * 2))

    Args:
        remove_attributes: delete the attributes nothing reads after folding
            (the parameters that were folded away).
    """

    name = "fold_constants"

    def __init__(self, remove_attributes=True):
        self.remove_attributes = remove_attributes

    def __call__(self, gm):
        graph = gm.graph
        constant = _constant_nodes(gm)
        values = _evaluate(gm, constant)
        folded = _fold_frontier(gm, constant, values)
        for node in reversed(graph.nodes):
            if node in constant and not node.users:
                graph.erase_node(node)
        if folded and self.remove_attributes:
            remove_unused_attributes(gm)
        return gm


def fold_constants(gm, remove_attributes=True):
    """Function form of `FoldConstants`."""
    return FoldConstants(remove_attributes)(gm)


def _constant_nodes(gm):
    """The nodes whose values do not depend on the graph inputs (an ordered dict used as a set)."""
    written = written_nodes(gm)
    constant = {}
    for node in gm.graph.nodes:
        if node in written or node.op not in ("get_attr", "call") or not is_pure(gm, node):
            continue
        if all(used in constant for used in node.all_input_nodes):
            constant[node] = None
    return constant


def _evaluate(gm, constant):
    """node -> value of every constant node, computed with the runtime."""
    interpreter = Interpreter(gm, garbage_collect_values=False)
    env = interpreter.env
    for node in constant:
        try:
            env[node] = interpreter.run_node(node)
        except Exception as exc:
            error = node_error(node, exc)
            raise type(error)(f"fold_constants: precomputing a constant sub-graph failed: {error}") from exc
    return env


class FoldedConstant:
    """How one folded buffer was computed, to compute it again when the tensors it read were written.

    Attributes:
        name: the buffer's attribute name (``_folded_constant_0``).
        sources: ``{qualified name: Tensor}`` the sub-graph reads (parameters, buffers).
    """

    def __init__(self, gm, name, graph, sources):
        self.name = name
        self.sources = sources
        self._owner = gm
        self._graph = graph
        self._module = None  # NOTE: built on the first refresh only: inference never pays for its codegen
        self._seen = self._versions()

    def _versions(self):
        return tuple(write_count(t) for t in self.sources.values())

    def refresh(self):
        """Recompute the buffer in place if a source was written since; True when it did."""
        seen = self._versions()
        if seen == self._seen and None not in seen:
            return False
        if self._module is None:
            self._module = GraphModule(self.sources, self._graph, "FoldedConstant")
        with no_grad():
            value = self._module()
        buffer = getattr(self._owner, self.name)
        buffer._data[...] = value._data
        self._seen = seen
        return True

    def __repr__(self):
        return f"FoldedConstant({self.name} <- {', '.join(self.sources)})"


def _recipe(gm, node, constant):
    """``(graph, sources)``: the constant cone of ``node`` as a graph of its own, and the tensors it reads."""
    cone, todo = {}, [node]
    while todo:
        n = todo.pop()
        if n not in cone:
            cone[n] = None
            todo.extend(n.all_input_nodes)
    graph, copies, sources = Graph(), {}, {}
    for n in constant:  # in graph order
        if n in cone:
            copies[n] = graph.node_copy(n, copies.__getitem__)
            if n.op == "get_attr":
                value = fetch_attr(gm, n.target)
                if isinstance(value, Tensor):
                    sources[n.target] = value
    graph.output(copies[node])
    return graph, sources



def _fold_frontier(gm, constant, values):
    """Replace the constant calls read by non-constant nodes; returns how many were folded."""
    kept = _kept(constant, values)
    frontier = [n for n in constant if n.op == "call" and any(u not in constant or u in kept for u in n.users)]
    folded = 0
    recipes = gm.__dict__.setdefault("folded_constants", [])
    # NOTE: every recipe is read off the graph before any folding rewires it
    cones = {node: _recipe(gm, node, constant) for node in frontier if isinstance(values[node], Tensor)}
    for node in frontier:
        value = values[node]
        if isinstance(value, Tensor):
            name = _free_name(gm)
            gm.register_buffer(name, value)
            recipes.append(FoldedConstant(gm, name, *cones[node]))
            with gm.graph.inserting_before(node):
                attr = gm.graph.get_attr(name)
            attr.meta = dict(node.meta)
            node.replace_all_uses_with(attr)
        elif _inlinable(value):
            for user in list(node.users):
                user.replace_input_with(node, value)
        else:  # e.g. a tuple of tensors read whole: its pieces stay computed at run time
            continue
        folded += 1
    return folded


def _kept(constant, values):
    """The constant nodes that stay computed at run time: values that are neither a tensor nor inlinable
    (a tuple of tensors) which a run-time node reads whole. What they read is folded in their place."""
    kept = set()
    for node in reversed(constant):
        value = values[node]
        if (node.op == "call" and not isinstance(value, Tensor) and not _inlinable(value)
                and any(u not in constant or u in kept for u in node.users)):
            kept.add(node)
    return kept


def _inlinable(value):
    if type(value) is tuple or isinstance(value, list):
        return all(_inlinable(v) for v in value)
    return type(value) in _INLINE_ATOMS


def _free_name(gm):
    i = 0
    while hasattr(gm, f"{PREFIX}{i}"):
        i += 1
    return f"{PREFIX}{i}"
