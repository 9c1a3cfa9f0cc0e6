"""`fold_conv_bn`: fold an eval-mode BatchNorm2d into the Conv2d before it."""
import copy

import numpy as np

from fxkit.graph.node import Node
from fxkit.runtime import nn
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.pass_base import Pass


class FoldConvBN(Pass):
    """Replace ``Conv2d`` followed by an eval-mode ``BatchNorm2d`` with one ``Conv2d``.

    In eval mode batch normalisation is a per-channel affine map,
    ``y = (x - mean) * gamma / sqrt(var + eps) + beta``, so it folds into the
    convolution's weight and bias::

        scale = gamma / sqrt(var + eps)
        weight' = weight * scale[:, None, None, None]
        bias'   = (bias - mean) * scale + beta          (bias = 0 for a conv without one)

    The pair is folded only when the batch norm reads the conv's output and
    nothing else does, the batch norm is in eval mode and tracks running
    statistics. The folded weights are computed in float64 and stored in the
    conv's dtype; a new ``Conv2d`` replaces the old one at its path (or, when
    the conv module is called elsewhere too, is added next to it as
    ``<path>_bn_folded``), and batch-norm modules no longer called are deleted.

    Example::

        before:                                  after:
            %x     = placeholder[x]                  %x     = placeholder[x]
            %conv  = call[self.conv](%x)             %conv  = call[self.conv](%x)
            %bn    = call[self.bn](%conv)            %relu  = call[relu](%conv)
            %relu  = call[relu](%bn)                 return %relu
            return %relu
    """

    name = "fold_conv_bn"
    # Rounding the folded weights to float32 moves outputs by about 1e-6 of their
    # scale; elements that cancel to near zero in a deep net (ResNet-50's logits
    # reach 30) see that as absolute error.
    rtol = 1e-4
    atol = 1e-4

    def __call__(self, gm):
        graph = gm.graph
        calls = {}
        for node in graph.nodes:
            if node.op == "call" and type(node.target) is str:
                calls[node.target] = calls.get(node.target, 0) + 1
        folded = False
        for bn_node in list(graph.nodes):
            conv_node = _foldable_conv(gm, bn_node)
            if conv_node is None:
                continue
            fused = fold_conv_bn_weights(gm.get_submodule(conv_node.target), gm.get_submodule(bn_node.target))
            target = conv_node.target
            if calls[target] > 1:
                calls[target] -= 1
                target = _free_path(gm, target + "_bn_folded")
                calls[target] = 1
            gm.add_submodule(target, fused)
            conv_node.target = target
            for key, value in bn_node.meta.items():
                conv_node.meta.setdefault(key, value)
            bn_node.replace_all_uses_with(conv_node)
            graph.erase_node(bn_node)
            folded = True
        if folded:
            gm.delete_all_unused_submodules()
        return gm


def fold_conv_bn(gm):
    """Function form of `FoldConvBN`."""
    return FoldConvBN()(gm)


def _foldable_conv(gm, bn_node):
    """The conv node ``bn_node`` folds into, or None."""
    if not bn_node.is_module(gm, nn.BatchNorm2d) or len(bn_node.args) != 1 or bn_node.kwargs:
        return None
    conv_node = bn_node.args[0]
    if not isinstance(conv_node, Node) or not conv_node.is_module(gm, nn.Conv2d) or len(conv_node.users) != 1:
        return None
    bn = gm.get_submodule(bn_node.target)
    if bn.training or bn.running_mean is None or bn.running_var is None:
        return None
    return conv_node


def fold_conv_bn_weights(conv, bn):
    """A copy of ``conv`` whose weight and bias also apply eval-mode ``bn``.

    Args:
        conv: an `nn.Conv2d` (left unchanged).
        bn: an `nn.BatchNorm2d` with running statistics.

    Returns:
        The new `nn.Conv2d`, with a bias whether or not ``conv`` had one.
    """
    weight = conv.weight
    xp = weight.device.xp
    wide = np.float64
    mean = bn.running_mean._data.astype(wide)
    var = bn.running_var._data.astype(wide)
    gamma = bn.weight._data.astype(wide) if bn.weight is not None else xp.ones_like(mean)
    beta = bn.bias._data.astype(wide) if bn.bias is not None else xp.zeros_like(mean)
    bias = conv.bias._data.astype(wide) if conv.bias is not None else xp.zeros_like(mean)
    scale = gamma / xp.sqrt(var + bn.eps)
    new_weight = weight._data.astype(wide) * scale.reshape(-1, 1, 1, 1)
    new_bias = (bias - mean) * scale + beta
    # NOTE: the memo makes deepcopy keep (not copy) the old tensors it is about to replace.
    memo = {id(t): t for t in (conv.weight, conv.bias) if t is not None}
    fused = copy.deepcopy(conv, memo)
    dtype = weight._data.dtype
    fused.weight = nn.Parameter(Tensor._make(new_weight.astype(dtype), weight.device), weight.requires_grad)
    fused.bias = nn.Parameter(Tensor._make(new_bias.astype(dtype), weight.device), weight.requires_grad)
    return fused


def _free_path(gm, path):
    candidate, i = path, 1
    while True:
        try:
            gm.get_submodule(candidate)
        except AttributeError:
            return candidate
        candidate = f"{path}_{i}"
        i += 1
