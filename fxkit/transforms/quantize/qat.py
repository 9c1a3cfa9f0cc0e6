"""`prepare_qat`: fake quantization for quantization-aware training.

Before and after ``prepare_qat(symbolic_trace(mlp))``::

    graph(x):                              graph(x):
        %x    = placeholder[x]                 %x    = placeholder[x]
        %fc1  = call[self.fc1](%x)             %activation_post_process_0 = call[self.activation_post_process_0](%x)
        %relu = call[relu](%fc1)               %fc1_weight = get_attr[fc1.weight]
        return %relu                           %fc1_weight_fake_quant = call[self.fc1_weight_fake_quant](%fc1_weight)
                                               %fc1_bias = get_attr[fc1.bias]
                                               %linear = call[linear](%activation_post_process_0,
                                                                      %fc1_weight_fake_quant, %fc1_bias)
                                               %relu = call[relu](%linear)
                                               %activation_post_process_1 = call[self.activation_post_process_1](%relu)
                                               return %activation_post_process_1

Every quantized layer's weight goes through a `FakeQuantize` and so does
every activation `prepare` would observe; training the result with fxkit
autograd (the straight-through estimator lets gradients through the rounding)
teaches the float weights to survive int8. Conv2d+BatchNorm2d pairs are folded
with the batch norm's running statistics first (frozen statistics), so the
weights trained are the ones `convert` quantizes, with the qparams the fake
quantizers used.
"""
from fxkit.errors import GraphError
from fxkit.runtime import nn
from fxkit.runtime.registry import get_op
from fxkit.transforms.fold_conv_bn import FoldConvBN
from fxkit.transforms.quantize.fake_quantize import FakeQuantize
from fxkit.transforms.quantize.patterns import LAYER_MODULES, layer_parameters, submodule
from fxkit.transforms.quantize.prepare import (annotate_shapes, free_attribute_name, graph_module_copy,
                                               insert_observers, mark_layers)
from fxkit.transforms.quantize.qconfig import as_mapping, default_qat_qconfig

_OPS = {"linear": get_op("linear"), "conv2d": get_op("conv2d")}


def prepare_qat(model, qconfig_map=None, example_inputs=None):
    """Insert fake quantizers into a copy of ``model`` for quantization-aware training.

    Args:
        model: a GraphModule or an ``fxkit.nn.Module`` (traced first); returned in training mode.
        qconfig_map: None (`default_qat_qconfig` everywhere), a `QConfig` with fake
            quantizers, a `QConfigMapping` or its dict form.
        example_inputs: optional inputs; the graph is run on them (fake quantization off)
            so ``print(gm.graph)`` shows shapes.

    Returns:
        The GraphModule to train; `convert` turns it into the integer model.

    Example:
        >>> qat = prepare_qat(model)
        >>> calibrate(qat, batches)               # starting ranges, as post-training quantization
        >>> train(qat, loader)                    # the usual loop: backward, step
        >>> quantized = convert(qat)
    """
    mapping = as_mapping(qconfig_map, default_qat_qconfig, "prepare_qat")
    gm = graph_module_copy(model, "prepare_qat")
    mapping.validate(gm, "prepare_qat")
    for qconfig in (mapping.global_qconfig, *mapping.object_types.values(), *mapping.module_names.values()):
        if qconfig is not None and not qconfig.is_qat:
            raise GraphError(f"prepare_qat: {qconfig!r} builds observers, which do not train; use a qconfig with "
                             f"FakeQuantize (default_qat_qconfig, per_channel_qat_qconfig)")
    for module in gm.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eval()  # NOTE: frozen statistics: folding needs the running ones
    gm = FoldConvBN()(gm)
    layers = [_fake_quantize_weight(gm, node) for node in mark_layers(gm, mapping)]
    insert_observers(gm, layers)
    gm.train()
    if example_inputs is not None:
        annotate_shapes(gm, example_inputs)
    return gm


def _fake_quantize_weight(gm, node):
    """Route the layer's weight through a FakeQuantize; a module call becomes its op on the
    module's parameters. Returns the layer's node (a new one for a module call)."""
    graph = gm.graph
    info = node.meta["quantize"]
    params = layer_parameters(gm, node)
    module = submodule(gm, node)
    owner = node.target if module is not None else params["weight_node"].target.rpartition(".")[0]
    name = free_attribute_name(gm, f"{(owner or node.name).replace('.', '_')}_weight_fake_quant")
    gm.add_submodule(name, info["qconfig"].weight())
    stack = node.meta.get("stack")
    with graph.inserting_before(node):
        weight = params["weight_node"] if module is None else graph.get_attr(f"{node.target}.weight")
        fake_quant = graph.call(name, (weight,), name=name)
        fake_quant.meta["stack"] = stack
        if module is None:
            node.replace_input_with(weight, fake_quant)
            return node
        bias = graph.get_attr(f"{node.target}.bias") if module.bias is not None else None
        args = (node.args[0], fake_quant, bias)
        if LAYER_MODULES[type(module)] == "conv2d":
            args += (module.stride, module.padding, module.dilation, module.groups)
        layer = graph.call(_OPS[info["kind"]], args, name=f"{node.name}_qat")
    layer.meta.update(node.meta)
    node.replace_all_uses_with(layer)
    graph.erase_node(node)
    return layer


def enable_observer(gm, enabled=True):
    """Let every fake quantizer of ``gm`` update its ranges (or freeze them); returns ``gm``."""
    for module in gm.modules():
        if isinstance(module, FakeQuantize):
            module.observer_enabled = enabled
    return gm


def enable_fake_quant(gm, enabled=True):
    """Turn fake quantization in ``gm`` on (or off, for a float baseline); returns ``gm``."""
    for module in gm.modules():
        if isinstance(module, FakeQuantize):
            module.fake_quant_enabled = enabled
    return gm
