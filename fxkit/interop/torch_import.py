"""`from_torch`: a PyTorch ``nn.Module`` as the equivalent fxkit module, weights included.

Three routes, chosen in this order:

1. **Layer tree.** A model built only of standard layers and containers
   (``Sequential``/``ModuleList``/``ModuleDict`` of ``Linear``, ``Conv2d``,
   ...) comes back as the same tree of `fxkit.nn` twins (same constructor
   arguments, parameter names and layouts), whatever the other arguments.
2. **torch.export** (`fxkit.interop.torch_export`), when ``example_inputs``
   is given: the model is captured by ``torch.export``, lowered toward core
   ATen while composites with a registry twin stay whole, and each ATen op is
   mapped to a registry op through one table. This route takes what
   torch.fx cannot trace (transformers' shape checks, ``torch._assert``, in-place
   ops) and keeps dims declared in ``dynamic_shapes`` symbolic.
3. **torch.fx** (`fxkit.interop.torch_fx_graph`), without ``example_inputs``:
   a custom ``forward`` is traced with ``torch.fx`` and its layers stay calls of
   `fxkit.nn` layers (``call[self.layer1.0.conv1]``).

torch is imported here, inside `from_torch`, only: ``import fxkit`` never loads it.

Example:
    >>> import torchvision
    >>> N = torch.export.Dim("N")
    >>> model = fxkit.from_torch(torchvision.models.resnet18().eval(), (torch.randn(2, 3, 224, 224),),
    ...                          dynamic_shapes=({0: N},))
    >>> model(fxkit.randn(5, 3, 224, 224)).shape
    (5, 1000)
"""
from collections import OrderedDict

from fxkit.runtime import nn


def from_torch(module, example_inputs=None, dynamic_shapes=None):
    """Convert a PyTorch module (and its weights) into an fxkit module.

    Args:
        module: a ``torch.nn.Module``.
        example_inputs: the arguments of one call of ``module`` (a tensor, a tuple
            of arguments or a dict of keyword arguments). Given, a model that is not
            a plain tree of standard layers is captured with ``torch.export``.
        dynamic_shapes: ``torch.export``'s ``dynamic_shapes`` for those inputs
            (``({0: torch.export.Dim("N")},)``); those dims stay symbolic, so the
            result runs at every size they allow.

    Returns:
        An `fxkit.nn` layer or container for a tree of standard layers; otherwise
        a `GraphModule` computing what ``module`` computes, in the same training
        mode, with the torch ``state_dict`` names.

    Raises:
        TraceError: torch.export (or torch.fx) cannot capture the model; names the
            user's line and the construct.
        GraphError: an ATen op, layer, function or method has no fxkit equivalent (named).
    """
    try:
        import torch
    except ImportError:
        raise ImportError("fxkit.from_torch needs PyTorch: pip install torch") from None
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"fxkit.from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    if dynamic_shapes is not None and example_inputs is None:
        raise TypeError("fxkit.from_torch: dynamic_shapes describes example_inputs; pass example_inputs too")
    if example_inputs is None or is_layer_tree(torch, module):
        return _convert(torch, module)
    from fxkit.interop.torch_export import import_program

    return import_program(torch, module, example_inputs, dynamic_shapes)


def is_layer_tree(torch, module):
    """Whether ``module`` is a standard layer, or a container of layer trees."""
    from fxkit.interop.torch_layers import layer_table

    if type(module) in layer_table(torch):
        return True
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    return type(module) in containers and all(is_layer_tree(torch, m) for m in module.children())


def _convert(torch, module):
    from fxkit.interop.torch_fx_graph import convert_traced
    from fxkit.interop.torch_layers import convert_layer, layer_table

    tnn = torch.nn
    spec = layer_table(torch).get(type(module))
    if spec is not None:
        return convert_layer(module, *spec)
    kind = type(module)
    if kind in (tnn.Sequential, tnn.ModuleList, tnn.ModuleDict):
        children = OrderedDict((name, _convert(torch, child)) for name, child in module.named_children())
        container = (nn.Sequential(children) if kind is tnn.Sequential
                     else nn.ModuleList(children.values()) if kind is tnn.ModuleList else nn.ModuleDict(children))
        return container.train(module.training)
    return convert_traced(torch, module)
