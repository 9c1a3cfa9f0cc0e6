"""`eliminate_common_subexpressions`: compute each pure expression once."""
import numpy as np

from fxkit.runtime.op import Op
from fxkit.transforms.effects import bound_arguments, is_pure, may_write_inputs, written_nodes
from fxkit.transforms.pass_base import Pass

_SCALARS = (bool, int, float, complex, str, type(None))


class EliminateCommonSubexpressions(Pass):
    """Replace every pure node equal to an earlier one by that earlier node.

    Two nodes are equal when they have the same opcode and target and the same
    arguments after canonicalising: an op's arguments are bound to its
    signature with defaults filled in (``sum(x, 1)`` equals ``sum(x, dim=1)``
    and ``sum(x, 1, keepdim=False)``), and constants compare by type and exact
    value (``1``, ``1.0`` and ``True`` differ, so do ``0.0`` and ``-0.0``).

    Impure nodes (random ops, ``setitem``, ``batch_norm``, dropout layers in
    training; see `fxkit.transforms.effects`) are never merged. Nothing
    computed before an impure node that may write its inputs (``setitem``) is
    reused after it, since the values those expressions read may have changed,
    and nodes whose values such a node may write are never merged.

    Example::

        before:                                  after:
            %x      = placeholder[x]                 %x     = placeholder[x]
            %relu   = call[relu](%x)                 %relu  = call[relu](%x)
            %relu_1 = call[relu](%x)                 %add   = call[add](%relu, %relu)
            %add    = call[add](%relu, %relu_1)      return %add
            return %add
    """

    name = "eliminate_common_subexpressions"

    def __call__(self, gm):
        graph = gm.graph
        written = written_nodes(gm)
        seen = {}
        for node in graph.nodes:
            if node.op not in ("call", "get_attr"):
                continue
            if not is_pure(gm, node):
                if may_write_inputs(gm, node):
                    seen.clear()
                continue
            if node in written:
                continue
            key = expression_key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node)
            if first is not node:
                node.replace_all_uses_with(first)
                graph.erase_node(node)
        return gm


def eliminate_common_subexpressions(gm):
    """Function form of `EliminateCommonSubexpressions`."""
    return EliminateCommonSubexpressions()(gm)


def expression_key(node):
    """A hashable key equal for nodes computing the same expression, or None when
    an argument cannot be compared (an unhashable constant)."""
    target = node.target
    bound = bound_arguments(target, node.args, node.kwargs) if isinstance(target, Op) else None
    # Not an op, or a call that will fail at run time anyway: compare as written.
    arguments = tuple(bound.items()) if bound is not None else (node.args, node.kwargs)
    try:
        key = (node.op, ("path", target) if type(target) is str else target, _canonical(arguments))
        hash(key)
    except TypeError:
        return None
    return key


def _canonical(value):
    """``value`` as nested tuples tagged by type; raises TypeError for unhashable leaves."""
    kind = type(value)
    if kind in _SCALARS or isinstance(value, np.generic):
        # repr tells 0.0 from -0.0 and makes nan equal to nan (numpy scalars too).
        return (kind, repr(value))
    if kind is tuple or isinstance(value, list):  # a node's lists are ImmutableLists
        return (kind, tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _canonical(v)) for k, v in value.items()))
    if kind is slice:
        return (slice, _canonical(value.start), _canonical(value.stop), _canonical(value.step))
    if isinstance(value, tuple):  # namedtuples
        return (kind, tuple(_canonical(v) for v in value))
    hash(value)
    return (kind, value)
