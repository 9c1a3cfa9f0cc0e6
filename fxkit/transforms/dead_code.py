"""`eliminate_dead_code`: erase nodes nobody uses, then the attributes nobody reads."""
from fxkit.transforms.effects import is_pure
from fxkit.transforms.pass_base import Pass


class EliminateDeadCode(Pass):
    """Erase unused pure nodes, then the submodules, parameters and buffers the graph no longer reads.

    The rule is `Graph.eliminate_dead_code`'s (placeholders, the output and
    impure calls stay) with one more guard: a call of a submodule in training
    mode stays too, since it may update state (``BatchNorm2d``'s running
    statistics) even when its result is unused. Nodes are visited from the
    output backwards, so chains of dead nodes go in one sweep.

    Example::

        before:                                  after:
            %x    = placeholder[x]                   %x    = placeholder[x]
            %w    = get_attr[w]                      %relu = call[relu](%x)
            %mul  = call[mul](%w, 2)                 return %relu
            %relu = call[relu](%x)
            return %relu                         (and ``w`` is deleted from the module)

    Args:
        remove_attributes: also delete submodules, parameters and buffers that
            no remaining node calls or reads.
        is_impure_node: ``fn(node) -> bool`` deciding which unused nodes must
            stay, in place of the effects analysis (torch.fx's argument of
            ``Graph.eliminate_dead_code``).
    """

    name = "eliminate_dead_code"

    def __init__(self, remove_attributes=True, is_impure_node=None):
        self.remove_attributes = remove_attributes
        self.is_impure_node = is_impure_node

    def __call__(self, gm):
        graph = gm.graph
        custom = self.is_impure_node
        for node in reversed(graph.nodes):
            if node.users or node.op not in ("get_attr", "call"):
                continue
            if (not custom(node)) if custom is not None else is_pure(gm, node):
                graph.erase_node(node)
        if self.remove_attributes:
            remove_unused_attributes(gm)
        return gm


def eliminate_dead_code(gm, remove_attributes=True, is_impure_node=None):
    """Function form of `EliminateDeadCode`: ``gm`` without unused nodes (and attributes)."""
    return EliminateDeadCode(remove_attributes, is_impure_node)(gm)


def remove_unused_attributes(gm):
    """Delete the submodules, parameters and buffers of ``gm`` that its graph neither calls nor reads.

    A tensor is kept when a ``get_attr`` reads it or it belongs to a called
    submodule (the module reads its own parameters).
    """
    gm.delete_all_unused_submodules()
    read = {node.target for node in gm.graph.nodes if node.op in ("get_attr", "call") and type(node.target) is str}
    prefixes = tuple(target + "." for target in read)
    tensors = [name for name, _ in gm.named_parameters(remove_duplicate=False)]
    tensors += [name for name, _ in gm.named_buffers(remove_duplicate=False)]
    for qualname in tensors:
        if qualname in read or qualname.startswith(prefixes):
            continue
        owner, _, field = qualname.rpartition(".")
        delattr(gm.get_submodule(owner) if owner else gm, field)
