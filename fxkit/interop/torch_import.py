"""`from_torch`: a PyTorch ``nn.Module`` as the equivalent fxkit module, weights included.

A standard layer becomes its `fxkit.nn` twin (same constructor arguments,
same parameter names and layouts); ``Sequential``/``ModuleList``/``ModuleDict``
become fxkit containers of converted children; any other module (one with its
own ``forward``) is traced with ``torch.fx`` and rebuilt as a `GraphModule`
(`fxkit.interop.torch_fx_graph`). Parameter names are kept, so the result's
``state_dict`` keys are the torch model's.

torch is imported here, inside `from_torch`, only: ``import fxkit`` never loads it.

Example:
    >>> import torchvision
    >>> model = fxkit.from_torch(torchvision.models.resnet18().eval())
    >>> model(fxkit.randn(1, 3, 224, 224)).shape
    (1, 1000)
"""
from collections import OrderedDict

from fxkit.runtime import nn


def from_torch(module):
    """Convert a PyTorch module (and its weights) into an fxkit module.

    Args:
        module: a ``torch.nn.Module`` built from the layers fxkit has (Linear,
            Conv2d, BatchNorm1d/2d, LayerNorm, Embedding, activations, pools,
            Dropout, Flatten, Identity, containers, MultiheadAttention; LSTMCell
            as registry ops), possibly with custom ``forward`` methods that
            torch.fx can trace.

    Returns:
        An `fxkit.nn` layer or container, or a `GraphModule` for modules with their
        own forward; it computes what ``module`` computes, in the same training mode.

    Raises:
        TraceError: torch.fx cannot trace a custom forward.
        GraphError: a layer, function or method has no fxkit equivalent (named).
    """
    try:
        import torch
    except ImportError:
        raise ImportError("fxkit.from_torch needs PyTorch: pip install torch") from None
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"fxkit.from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    return _convert(torch, module)


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
