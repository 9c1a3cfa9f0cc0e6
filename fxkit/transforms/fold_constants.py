"""`fold_constants`: precompute what depends only on the module's attributes and constants."""
from fxkit.graph.interpreter import Interpreter, node_error
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

    The values are computed with the runtime when the pass runs: later changes
    to the parameters they came from do not reach them (fold for inference).

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


def _fold_frontier(gm, constant, values):
    """Replace the constant calls read by non-constant nodes; returns how many were folded."""
    frontier = [n for n in constant if n.op == "call" and any(u not in constant for u in n.users)]
    folded = 0
    for node in frontier:
        value = values[node]
        if isinstance(value, Tensor):
            name = _free_name(gm)
            gm.register_buffer(name, value)
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


def _inlinable(value):
    if type(value) is tuple or isinstance(value, list):
        return all(_inlinable(v) for v in value)
    return type(value) in _INLINE_ATOMS


def _free_name(gm):
    i = 0
    while hasattr(gm, f"{PREFIX}{i}"):
        i += 1
    return f"{PREFIX}{i}"
