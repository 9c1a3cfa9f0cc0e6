"""`prepare`: get a float model ready for post-training quantization.

``prepare(symbolic_trace(mlp))`` turns::

    graph(x):
        %x    = placeholder[x]
        %fc1  = call[self.fc1](%x)
        %relu = call[relu](%fc1)
        %fc2  = call[self.fc2](%relu)
        return %fc2

into::

    graph(x):
        %x    = placeholder[x]
        %activation_post_process_0 = call[self.activation_post_process_0](%x)
        %fc1  = call[self.fc1](%activation_post_process_0)
        %relu = call[relu](%fc1)
        %activation_post_process_1 = call[self.activation_post_process_1](%relu)
        %fc2  = call[self.fc2](%activation_post_process_1)
        %activation_post_process_2 = call[self.activation_post_process_2](%fc2)
        return %activation_post_process_2

Steps: eval-mode dropout goes and Conv2d+BatchNorm2d fold into one Conv2d
(`fold_conv_bn`); each quantizable layer (`patterns`) gets its qconfig from the
mapping, and a ReLU that is its only user fuses into it (no observer between
them: the integer kernel clamps at the zero point); then an observer goes after
each layer's output (after the fused ReLU) and on each layer input that is not
already an observed value carried through pooling or reshapes. Each layer's
node records ``meta["quantize"]``: its kind, module, qconfig and fused ReLU, which
`convert` reads to quantize the weight.
"""
import copy

from fxkit.errors import GraphError
from fxkit.graph import GraphModule
from fxkit.runtime.nn.module import Module
from fxkit.tracer import symbolic_trace
from fxkit.transforms.fold_conv_bn import FoldConvBN
from fxkit.transforms.fold_conv_bn_ops import FoldConvBNOps
from fxkit.transforms.quantize.fake_quantize import FakeQuantize, is_observer
from fxkit.transforms.quantize.patterns import (find_layer, fused_relu, is_observer_call, is_transparent,
                                                layer_parameters)
from fxkit.transforms.quantize.qconfig import as_mapping, default_qconfig
from fxkit.transforms.remove_dropout import RemoveDropout
from fxkit.transforms.shape_prop import ShapeProp

OBSERVER_PREFIX = "activation_post_process_"


def prepare(model, qconfig_map=None, example_inputs=None):
    """Insert observers into a copy of ``model`` for post-training quantization.

    Args:
        model: a GraphModule, or an ``fxkit.nn.Module`` (traced first), in eval mode.
        qconfig_map: None (`default_qconfig` everywhere), a `QConfig`, a `QConfigMapping`
            or its dict form.
        example_inputs: optional inputs (one per forward argument); the graph is run on
            them (observers off) so ``print(prepared.graph)`` shows shapes.

    Returns:
        The prepared GraphModule; the model passed in is not changed.

    Raises:
        GraphError: the model is in training mode, or the mapping names a missing module.
        DTypeError: the mapping holds fake quantizers (use `prepare_qat`) or no QConfig.

    Example:
        >>> prepared = prepare(fxkit.symbolic_trace(model.eval()))
        >>> calibrate(prepared, batches)
        >>> quantized = convert(prepared)
    """
    mapping = as_mapping(qconfig_map, default_qconfig, "prepare")
    gm = graph_module_copy(model, "prepare")
    mapping.validate(gm, "prepare")
    _refuse_qat_configs(mapping)
    if gm.training:
        raise GraphError("prepare: the model is in training mode; post-training quantization observes an "
                         "eval-mode model (call model.eval() first), or use prepare_qat for quantization-aware "
                         "training")
    gm = FoldConvBNOps()(FoldConvBN()(RemoveDropout()(gm)))
    insert_observers(gm, mark_layers(gm, mapping))
    if example_inputs is not None:
        annotate_shapes(gm, example_inputs)
    return gm


def graph_module_copy(model, where):
    """A GraphModule of ``model`` that shares no parameter with it (traced when needed)."""
    if isinstance(model, GraphModule):
        return copy.deepcopy(model)
    if isinstance(model, Module):
        return copy.deepcopy(symbolic_trace(model))
    raise GraphError(f"{where}: expected an fxkit.nn.Module or a GraphModule, got {type(model).__name__}")


def _refuse_qat_configs(mapping):
    qconfigs = [mapping.global_qconfig, *mapping.object_types.values(), *mapping.module_names.values()]
    for qconfig in qconfigs:
        if qconfig is not None and qconfig.is_qat:
            raise GraphError(f"prepare: {qconfig!r} builds fake quantizers, which are for quantization-aware "
                             f"training; use prepare_qat, or a qconfig with observers (default_qconfig)")


def mark_layers(gm, mapping):
    """Find the quantizable layers, give each its qconfig and fused ReLU (``meta["quantize"]``).

    Returns:
        The layer nodes that will be quantized, in graph order.
    """
    marked = []
    for node in gm.graph.nodes:
        layer = find_layer(gm, node)
        if layer is None:
            continue
        qconfig = mapping.qconfig_for(layer.module_name, layer.object_type)
        reason = layer_parameters(gm, node)["reason"]
        if qconfig is None and reason is None:
            reason = "the qconfig mapping gives it None"
        relu = fused_relu(gm, node)
        node.meta["quantize"] = {"kind": layer.kind, "module": layer.module_name,
                                 "qconfig": None if reason else qconfig,
                                 "fused_relu": relu.name if relu is not None and not reason else None,
                                 "reason": reason}
        if reason is None:
            marked.append(node)
    return marked


def insert_observers(gm, layers):
    """Put an activation observer after each layer (after its fused ReLU) and on its input.

    An input that already is an observed value, possibly carried through transparent
    ops (pooling, reshapes, ReLU), shares that observer; two layers reading the same
    value share one observer.
    """
    graph = gm.graph
    count = [0]

    def add_observer(after, qconfig):
        name = free_attribute_name(gm, f"{OBSERVER_PREFIX}{count[0]}")
        count[0] += 1
        gm.add_submodule(name, qconfig.activation())
        with graph.inserting_after(after):
            node = graph.call(name, (after,), name=name)
        node.meta["stack"] = after.meta.get("stack")
        return node

    for layer in layers:
        info = layer.meta["quantize"]
        qconfig = info["qconfig"]
        source = layer.args[0]
        if not _observed(gm, source):
            existing = next((u for u in source.users if is_observer_call(gm, u)), None)
            layer.replace_input_with(source, existing or add_observer(source, qconfig))
        out = next(u for u in layer.users if u.name == info["fused_relu"]) if info["fused_relu"] else layer
        observer = add_observer(out, qconfig)
        out.replace_all_uses_with(observer)


def _observed(gm, node):
    """Whether ``node`` is an observer's output, possibly carried through transparent ops."""
    while not is_observer_call(gm, node):
        if not is_transparent(gm, node) or not node.args or getattr(node.args[0], "op", None) is None:
            return False
        node = node.args[0]
    return True


def free_attribute_name(gm, name):
    """``name``, or ``name_1``, ``name_2``, ... when ``gm`` already has an attribute of that name."""
    candidate, i = name, 1
    while hasattr(gm, candidate):
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def annotate_shapes(gm, example_inputs):
    """Run ``gm`` on ``example_inputs`` with every observer off, recording shapes in node meta."""
    observers = [m for m in gm.modules() if is_observer(m)]
    states = [_pause(m) for m in observers]
    try:
        ShapeProp(gm).propagate(*(example_inputs if isinstance(example_inputs, (tuple, list)) else [example_inputs]))
    finally:
        for module, state in zip(observers, states):
            _resume(module, state)


def _pause(module):
    if isinstance(module, FakeQuantize):
        state = (module.observer_enabled, module.fake_quant_enabled)
        module.observer_enabled = module.fake_quant_enabled = False
        return state
    state = module.enabled
    module.enabled = False
    return state


def _resume(module, state):
    if isinstance(module, FakeQuantize):
        module.observer_enabled, module.fake_quant_enabled = state
    else:
        module.enabled = state
