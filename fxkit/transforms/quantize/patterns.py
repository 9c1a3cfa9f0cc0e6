"""The layers quantization rewrites, and the ops quantized values flow through unchanged.

Two tables drive `prepare`, `prepare_qat` and `convert`:

* quantizable layers: ``nn.Linear`` and ``nn.Conv2d`` modules, and calls of the
  ``linear`` and ``conv2d`` ops whose weight is a parameter (``get_attr``, or a
  weight fake quantizer on one after `prepare_qat`), each optionally followed by
  a ReLU or ReLU6 that is fused into it (the kernel clamps at the output zero
  point; ReLU6's upper bound needs no clamp of its own, see `fused_relu`);
* ops that commute with affine quantization (`TRANSPARENT_OPS`, `TRANSPARENT_MODULES`):
  max pooling and reshapes move integers as they move floats, and ReLU is
  ``max(q, zero_point)``, so a quantized value passes through them with its
  scale and zero point and needs no observer of its own.
"""
from typing import NamedTuple

from fxkit.runtime import nn
from fxkit.runtime.registry import get_op
from fxkit.transforms.effects import bound_arguments
from fxkit.transforms.quantize.fake_quantize import is_observer

LAYER_MODULES = {nn.Linear: "linear", nn.Conv2d: "conv2d"}
LAYER_OPS = {get_op("linear"): "linear", get_op("conv2d"): "conv2d"}
TRANSPARENT_OPS = frozenset(get_op(name) for name in (
    "max_pool2d", "relu", "view", "reshape", "flatten", "contiguous", "squeeze", "unsqueeze", "transpose",
    "permute"))
TRANSPARENT_MODULES = (nn.MaxPool2d, nn.ReLU, nn.Flatten, nn.Identity)
_RELU = get_op("relu")
_RELU6 = get_op("relu6")


class Layer(NamedTuple):
    """A quantizable layer call found in a graph.

    Attributes:
        kind: ``"linear"`` or ``"conv2d"``.
        module_name: the qualified name the qconfig mapping matches (the module, or the
            owner of a functional call's weight), or None.
        object_type: the module class or the op.
    """

    kind: str
    module_name: object
    object_type: object


def submodule(gm, node):
    """The module a ``call`` node calls, or None for ops and functions."""
    if node.op == "call" and type(node.target) is str:
        return gm.get_submodule(node.target)
    return None


def call_arguments(node):
    """``{parameter: value}`` of an op call, defaults filled in."""
    return bound_arguments(node.target, node.args, node.kwargs)


def weight_source(gm, value):
    """``(get_attr node, weight fake quantizer node or None)`` of a layer's weight argument, or None
    when the weight is computed in the graph."""
    if getattr(value, "op", None) == "get_attr":
        return value, None
    module = submodule(gm, value) if getattr(value, "op", None) == "call" else None
    if module is not None and is_observer(module) and getattr(value.args[0], "op", None) == "get_attr":
        return value.args[0], value
    return None


def find_layer(gm, node):
    """The `Layer` of a quantizable call, or None (also for calls that cannot be quantized)."""
    if node.op != "call":
        return None
    module = submodule(gm, node)
    if module is not None:
        kind = LAYER_MODULES.get(type(module))
        return Layer(kind, node.target, type(module)) if kind else None
    kind = LAYER_OPS.get(node.target)
    if kind is None:
        return None
    bound = call_arguments(node)
    source = weight_source(gm, bound["weight"]) if bound else None
    if source is None:
        return None
    # NOTE: an imported model (fxkit.from_torch) keeps its weights as flat top-level attributes
    # (conv_bn folding renames them too); the module the call came from is in its source location.
    owner = source[0].target.rpartition(".")[0] or getattr(node.meta.get("stack"), "module", None) or None
    return Layer(kind, owner, node.target)


def layer_parameters(gm, node):
    """What a quantizable layer call computes with, as a dict: ``weight`` (the float weight
    Tensor), ``weight_node`` (its ``get_attr``), ``weight_fake_quant`` (the node of its fake
    quantizer, or None), ``bias`` (a Tensor or None) and, for convolutions, ``stride``,
    ``padding`` (an even pair, or None when it cannot be one), ``dilation``, ``groups``;
    ``reason`` says why the integer kernel cannot compute it (None when it can)."""
    module = submodule(gm, node)
    if module is not None:
        params = {"weight": module.weight, "weight_node": None, "weight_fake_quant": None, "bias": module.bias,
                  "reason": None}
        if isinstance(module, nn.Conv2d):
            params.update(stride=module.stride, dilation=module.dilation, groups=module.groups,
                          padding=conv_padding(module.padding, module.kernel_size, module.dilation))
            if module.padding_mode != "zeros":
                params["reason"] = f"padding_mode={module.padding_mode!r} has no integer kernel (only zero padding)"
        return _explained(params)
    bound = call_arguments(node)
    weight_node, fake_quant = weight_source(gm, bound["weight"])
    bias = bound["bias"]
    params = {"weight": _attribute(gm, weight_node.target), "weight_node": weight_node,
              "weight_fake_quant": fake_quant, "bias": None, "reason": None}
    if bias is not None:
        if getattr(bias, "op", None) != "get_attr":
            params["reason"] = "its bias is computed in the graph, not a parameter"
            return params
        params["bias"] = _attribute(gm, bias.target)
    if LAYER_OPS[node.target] == "conv2d":
        kernel = tuple(params["weight"].shape[2:])
        dilation = _pair(bound["dilation"])
        padding = bound["padding"]
        params.update(stride=_pair(bound["stride"]), dilation=dilation, groups=bound["groups"],
                      padding=conv_padding(padding if isinstance(padding, str) else _pair(padding), kernel, dilation))
    return _explained(params)


def _explained(params):
    if params["reason"] is None and "padding" in params and params["padding"] is None:
        params["reason"] = "padding='same' with an even kernel pads unevenly; the integer kernel pads evenly"
    return params


def _pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _attribute(gm, qualname):
    *path, field = qualname.split(".")
    owner = gm.get_submodule(".".join(path)) if path else gm
    return getattr(owner, field)


def conv_padding(padding, kernel_size, dilation):
    """A Conv2d's padding as an even ``(ph, pw)``: numbers as they are, 'valid' as zeros,
    'same' as half the dilated kernel; None when 'same' would pad unevenly."""
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        spans = [d * (k - 1) for k, d in zip(kernel_size, dilation)]
        if any(s % 2 for s in spans):
            return None
        return tuple(s // 2 for s in spans)
    return tuple(padding)


def is_relu(gm, node):
    """A ReLU call: the ``relu`` op or an ``nn.ReLU`` module."""
    return node.op == "call" and (node.target is _RELU or isinstance(submodule(gm, node), nn.ReLU))


def is_relu6(gm, node):
    """A ReLU6 call: the ``relu6`` op or an ``nn.ReLU6`` module."""
    return node.op == "call" and (node.target is _RELU6 or isinstance(submodule(gm, node), nn.ReLU6))


def fused_relu(gm, node):
    """The ReLU or ReLU6 that is the only user of ``node``, or None: it fuses into the layer.

    NOTE: the integer kernel's ``relu=True`` clamps at the output zero point only; ReLU6
    needs no upper clamp of its own because the output observer watches the ReLU6's
    output: its range ends at or below 6 and starts at 0 (so the zero point is exactly
    ``quant_min`` and ``quant_max`` stands for the range's end), and saturation at
    ``quant_max`` is the clamp at 6."""
    users = list(node.users)
    if len(users) == 1 and (is_relu(gm, users[0]) or is_relu6(gm, users[0])) and users[0].args[0] is node:
        return users[0]
    return None


def is_transparent(gm, node):
    """Whether a call passes a quantized input through with its scale and zero point."""
    if node.op != "call":
        return False
    if node.target in TRANSPARENT_OPS:
        return not (node.target is get_op("max_pool2d") and call_arguments(node)["return_indices"])
    return isinstance(submodule(gm, node), TRANSPARENT_MODULES)


def is_observer_call(gm, node):
    """Whether ``node`` calls an observer or a fake quantizer."""
    return node.op == "call" and is_observer(submodule(gm, node))
