"""`quantize_dynamic`: int8 weights and per-call activation quantization for linear layers, with no calibration.

As ``torch.ao.quantization.quantize_dynamic`` does for ``nn.Linear``: each
layer's float weight becomes symmetric int8 (per output feature, or one scale
for the tensor) once, here, and the layer becomes one
``quantized_dynamic_linear`` node that quantizes its input from the input's own
range on every call, accumulates in int32 and returns float. No observers and
no calibration data are needed, which is why transformers use it: their
activation ranges change with every sequence.

A linear layer is any of: the ``linear`` op, ``addmm(bias, x, w)`` (GPT-2's
``Conv1D``), ``matmul(x, w)``/``mm(x, w)`` with a 2-D parameter ``w``, or an
`fxkit.nn.Linear` submodule call; its weight must be a parameter or buffer
(a ``get_attr``), not a value computed in the graph.
"""
import copy

import numpy as np

from fxkit.errors import GraphError
from fxkit.graph.graph_module import GraphModule
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.nn.linear import Linear
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.quantize.convert import _delete_attribute

_KERNEL = get_op("quantized_dynamic_linear")
_INT8_MAX = 127


def quantize_dynamic(gm, per_channel=True, filter_fn=None):
    """A copy of ``gm`` whose linear layers run on int8 weights with dynamically quantized activations.

    Args:
        gm: a `GraphModule` (e.g. from `fxkit.from_torch`); it is not changed.
        per_channel: one weight scale per output feature (more accurate, the
            default) or one per weight tensor (``torch.per_tensor_symmetric``).
        filter_fn: ``filter_fn(weight_name) -> bool`` choosing the layers to
            quantize by their weight's qualified name; default all.

    Returns:
        The new `GraphModule`; ``.quantized_layers`` lists the weight names it quantized.

    Raises:
        GraphError: ``gm`` is not a GraphModule.

    Example:
        >>> q = quantize_dynamic(fxkit.from_torch(bert, (ids, mask)))
        >>> q(ids, mask)   # int8 matmuls, float outputs
    """
    if not isinstance(gm, GraphModule):
        raise GraphError(f"quantize_dynamic: expected a GraphModule, got {type(gm).__name__}; "
                         f"trace the model first (fxkit.symbolic_trace or fxkit.from_torch)")
    gm = copy.deepcopy(gm)
    done, cache = [], {}
    for node in list(gm.graph.nodes):
        layer = _linear_layer(gm, node)
        if layer is None:
            continue
        x, weight_name, transposed, bias = layer
        if filter_fn is not None and not filter_fn(weight_name):
            continue
        if weight_name not in cache:
            cache[weight_name] = _quantized_weight(gm, weight_name, transposed, per_channel)
        int8_name, scale_name = cache[weight_name]
        with gm.graph.inserting_before(node):
            arguments = (x, gm.graph.get_attr(int8_name), gm.graph.get_attr(scale_name), bias)
            replacement = gm.graph.call(_KERNEL, arguments, name=f"{node.name}_dq")
        replacement.meta.update({k: v for k, v in node.meta.items() if k in ("stack", "source")})
        node.replace_all_uses_with(replacement)
        gm.graph.erase_node(node)
        done.append(weight_name)
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    read = {n.target for n in gm.graph.find_nodes(op="get_attr")}
    for name in set(done) - read:
        _delete_attribute(gm, name)  # a float weight no other node reads (a tied embedding stays)
    gm.recompile()
    gm.quantized_layers = done
    return gm


def _linear_layer(gm, node):
    """``(x, weight name, weight is (in, out), bias node or None)`` when ``node`` is a linear layer, else None."""
    if node.is_module(gm, Linear):
        module = gm.get_submodule(node.target)
        if len(node.args) != 1 or node.kwargs:
            return None
        bias = None
        if module.bias is not None:  # moved onto gm, so that the Linear submodule can go
            name = _free_name(gm, f"{node.target.replace('.', '_')}_bias")
            gm.register_buffer(name, module.bias.detach())
            with gm.graph.inserting_before(node):
                bias = gm.graph.get_attr(name)
        return node.args[0], f"{node.target}.weight", False, bias
    if node.op != "call":
        return None
    name = getattr(node.target, "name", None)
    args, kwargs = list(node.args), dict(node.kwargs)
    if name == "linear":
        x, weight = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        transposed = False
    elif name == "addmm" and len(args) == 3 and all(kwargs.get(k, 1) == 1 for k in ("beta", "alpha")):
        bias, x, weight = args
        transposed = True
    elif name in ("matmul", "mm") and len(args) == 2 and not kwargs:
        (x, weight), bias, transposed = args, None, True
    else:
        return None
    if getattr(weight, "op", None) != "get_attr" or not _float_matrix(gm, weight.target):
        return None
    if bias is not None and getattr(bias, "op", None) is None:
        return None  # a number or a constant: not a linear layer's bias
    return x, weight.target, transposed, bias


def _float_matrix(gm, target):
    value = _fetch(gm, target)
    return isinstance(value, Tensor) and len(value.shape) == 2 and value.dtype in (_dt.float32, _dt.float64)


def _fetch(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _quantized_weight(gm, weight_name, transposed, per_channel):
    """Register the int8 weight ``(out, in)`` and its float32 scale(s); returns their buffer names."""
    tensor = _fetch(gm, weight_name)
    weight = np.asarray(tensor.detach().cpu().numpy(), np.float64)
    if transposed:
        weight = weight.T
    amax = np.abs(weight).max(axis=1) if per_channel else np.abs(weight).max()
    scale = np.maximum(amax / _INT8_MAX, np.finfo(np.float32).tiny).astype(np.float32)
    column = scale[:, None] if per_channel else scale
    int8 = np.clip(np.rint(weight / column), -_INT8_MAX, _INT8_MAX).astype(np.int8)
    base = weight_name.replace(".", "_")
    names = []
    for suffix, array in (("int8", int8), ("scale", scale)):
        name = _free_name(gm, f"{base}_{suffix}")
        gm.register_buffer(name, Tensor._make(tensor.device.xp.asarray(np.array(array, order="C")), tensor.device))
        names.append(name)
    return tuple(names)


def _free_name(gm, base):
    name, i = base, 1
    while hasattr(gm, name):
        name, i = f"{base}_{i}", i + 1
    return name
