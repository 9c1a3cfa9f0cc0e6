"""`remove_dropout`: drop dropout calls that do nothing (eval mode), or all of them for export."""
from fxkit.runtime import nn
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.transforms.effects import bound_arguments
from fxkit.transforms.pass_base import Pass

_DROPOUT_OPS = ("dropout", "dropout2d")
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout2d)


class RemoveDropout(Pass):
    """Remove dropout that is the identity: ``dropout``/``dropout2d`` ops and Dropout/Dropout2d layers.

    The tracer records ``F.dropout(x, training=self.training)`` with the flag
    baked in as a constant, so an op call is removed when its ``training``
    argument is ``False`` (or ``p`` is 0); a layer call when the layer is in
    eval mode (or its ``p`` is 0). Training-mode dropout stays, unless
    ``force=True``: then every dropout goes, which is what an inference export
    wants whatever mode the model was traced in, and ops that drop internally
    (``scaled_dot_product_attention``'s ``dropout_p``) get ``dropout_p=0.0``.
    Users of a removed call read its input instead; layers no longer called are deleted.

    Example::

        before:                                            after:
            %x       = placeholder[x]                          %x    = placeholder[x]
            %dropout = call[dropout](%x, training=False)       %relu = call[relu](%x)
            %relu    = call[relu](%dropout)                    return %relu
            return %relu

    Args:
        force: also remove dropout that is active (training mode).
    """

    name = "remove_dropout"

    def __init__(self, force=False):
        self.force = force

    def __call__(self, gm):
        graph = gm.graph
        removed = False
        for node in list(graph.nodes):
            if self.force:
                _stop_internal_dropout(node)
            source = self._identity_input(gm, node)
            if source is None:
                continue
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            removed = True
        if removed:
            gm.delete_all_unused_submodules()
        return gm

    def _identity_input(self, gm, node):
        """The input ``node`` passes through when it is removable dropout, else None."""
        if node.op != "call":
            return None
        for name in _DROPOUT_OPS:
            if node.is_op(name):
                arguments = bound_arguments(get_op(name), node.args, node.kwargs)
                if arguments is None:
                    return None
                inactive = arguments["training"] is False or arguments["p"] == 0
                return arguments["input"] if self.force or inactive else None
        if node.is_module(gm, _DROPOUT_MODULES) and len(node.args) == 1 and not node.kwargs:
            module = gm.get_submodule(node.target)
            return node.args[0] if self.force or not module.training or module.p == 0 else None
        return None


def _stop_internal_dropout(node):
    """Set ``dropout_p=0.0`` on a call of an op that drops internally (attention's weights)."""
    if node.op != "call" or not isinstance(node.target, Op) or "dropout_p" not in node.target.signature.parameters:
        return
    arguments = bound_arguments(node.target, node.args, node.kwargs)
    if arguments is None or arguments["dropout_p"] == 0:
        return
    position = list(node.target.signature.parameters).index("dropout_p")
    if len(node.args) > position:
        node.update_arg(position, 0.0)
    else:
        node.update_kwarg("dropout_p", 0.0)


def remove_dropout(gm, force=False):
    """Function form of `RemoveDropout`."""
    return RemoveDropout(force)(gm)
