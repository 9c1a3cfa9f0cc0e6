"""`fold_conv_bn_ops`: fold an eval-mode ``batch_norm`` op into the ``conv2d`` op before it.

`FoldConvBN` folds ``nn.BatchNorm2d`` submodules into ``nn.Conv2d`` ones; a
model imported with `fxkit.from_torch` through torch.export has no such
submodules, only ``conv2d`` and ``batch_norm`` calls on ``get_attr`` weights.
This pass does the same fold on those (same arithmetic, in float64, through
`fold_conv_bn_weights`), so post-training quantization sees one convolution
whose integer kernel absorbs the normalisation instead of a float batch norm
between two quantized regions. Weights no node reads any more are deleted.
"""
from fxkit.graph.node import Node
from fxkit.runtime import nn
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.fold_conv_bn import fold_conv_bn_weights
from fxkit.transforms.pass_base import Pass
from fxkit.transforms.shape_prop import meta_of, record_meta


class FoldConvBNOps(Pass):
    """Replace ``conv2d(x, w, b, ...)`` followed by ``batch_norm(conv, mean, var, gamma, beta, False, ...)``
    with one ``conv2d`` on folded weights; the pair folds only when the batch norm reads the conv's
    output, nothing else does, it is in eval mode and every parameter is a ``get_attr``."""

    name = "fold_conv_bn_ops"
    rtol = 1e-4  # as FoldConvBN: folded weights rounded to float32
    atol = 1e-4

    def __call__(self, gm):
        graph = gm.graph
        folded = []
        for bn_node in list(graph.nodes):
            pair = _foldable(gm, bn_node)
            if pair is None:
                continue
            conv_node, conv, bn = pair
            fused = fold_conv_bn_weights(conv, bn)
            names = []
            for suffix, tensor in (("weight", fused.weight), ("bias", fused.bias)):
                name, i = f"{conv_node.name}_folded_{suffix}", 1
                while hasattr(gm, name):
                    name, i = f"{conv_node.name}_folded_{suffix}_{i}", i + 1
                gm.register_parameter(name, tensor)
                names.append(name)
            with graph.inserting_before(conv_node):
                weight, bias = (graph.get_attr(n) for n in names)
            if "tensor_meta" in conv_node.meta:  # after shape inference (a backend's pipeline): keep it whole
                record_meta(weight, meta_of(fused.weight))
                record_meta(bias, meta_of(fused.bias))
            args = list(conv_node.args)
            args[1] = weight
            if len(args) > 2:
                args[2] = bias
            elif "bias" in conv_node.kwargs:
                conv_node.kwargs = {**conv_node.kwargs, "bias": bias}
            else:
                args.append(bias)  # NOTE: positional, as conv2d(input, weight, bias): calls stay keyword-free
            conv_node.args = tuple(args)
            for key, value in bn_node.meta.items():
                conv_node.meta.setdefault(key, value)
            bn_node.replace_all_uses_with(conv_node)
            graph.erase_node(bn_node)
            folded.append(conv_node)
        if folded:
            graph.eliminate_dead_code()
            _delete_unread(gm)
            gm.recompile()
        return gm


def fold_conv_bn_ops(gm):
    """Function form of `FoldConvBNOps`."""
    return FoldConvBNOps()(gm)


def _op_name(node):
    return getattr(node.target, "name", None) if isinstance(node, Node) and node.op == "call" else None


def _attribute(gm, node):
    """The tensor a ``get_attr`` node reads (None for None), or False when ``node`` is something else."""
    if node is None:
        return None
    if not isinstance(node, Node) or node.op != "get_attr":
        return False
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, Tensor) else False


def _foldable(gm, bn_node):
    """``(conv node, an nn.Conv2d view of it, an nn.BatchNorm2d view of the norm)``, or None."""
    if _op_name(bn_node) != "batch_norm" or bn_node.kwargs or len(bn_node.args) < 5:
        return None
    args = list(bn_node.args) + [False, 0.1, 1e-5][len(bn_node.args) - 5:]
    conv_node, mean, var, gamma, beta, training, _, eps = args[:8]
    if training is not False or _op_name(conv_node) != "conv2d" or len(conv_node.users) != 1:
        return None
    tensors = [_attribute(gm, n) for n in (mean, var, gamma, beta)]
    if any(t is False for t in tensors) or tensors[0] is None or tensors[1] is None:
        return None
    conv_args = list(conv_node.args)
    bias_node = conv_args[2] if len(conv_args) > 2 else conv_node.kwargs.get("bias")
    weight, bias = _attribute(gm, conv_args[1]) if len(conv_args) > 1 else False, _attribute(gm, bias_node)
    if weight is False or weight is None or bias is False or len(weight.shape) != 4:
        return None
    conv = _Conv(weight, bias)
    bn = _BatchNorm(*tensors, eps)
    return conv_node, conv, bn


class _Conv:
    """What `fold_conv_bn_weights` reads of a conv: its weight and bias, deep-copied into the result."""

    def __init__(self, weight, bias):
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, False)
        self.bias = bias


class _BatchNorm:
    def __init__(self, running_mean, running_var, weight, bias, eps):
        self.running_mean, self.running_var, self.weight, self.bias, self.eps = (
            running_mean, running_var, weight, bias, float(eps))


def _delete_unread(gm):
    """Delete the parameters and buffers of ``gm`` no ``get_attr`` reads any more (the unfolded weights)."""
    read = {n.target for n in gm.graph.find_nodes(op="get_attr")}
    for name, _ in list(gm.named_parameters()) + list(gm.named_buffers()):
        if name in read:
            continue
        *path, field = name.split(".")
        owner = gm.get_submodule(".".join(path)) if path else gm
        if hasattr(owner, field):
            delattr(owner, field)


__all__ = ["FoldConvBNOps", "fold_conv_bn_ops"]
