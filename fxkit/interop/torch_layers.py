"""The PyTorch layers fxkit converts one for one, and how.

``layer_table(torch)`` maps each ``torch.nn`` layer class to its `fxkit.nn`
twin and the constructor arguments that are not read off the torch layer by
name (``MultiheadAttention``'s ``bias`` is ``in_proj_bias is not None``).
Everything else is generic: each argument of the fxkit constructor is the
torch layer's attribute of that name (a ``bias`` parameter counts as
``bias=True``), and the weights are then copied with `load_torch_state_dict`.

torch is imported by the caller (`fxkit.interop.torch_import`) and passed in,
so this module never imports it.
"""
import functools
import inspect

import numpy as np

from fxkit.errors import DTypeError
from fxkit.runtime import nn

_SKIPPED = {"self", "device", "dtype"}


@functools.cache
def layer_table(torch):
    """``{torch layer class: (fxkit layer class, {argument: torch module -> value})}``."""
    tnn = torch.nn
    same = ("Linear", "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Embedding", "ReLU", "GELU", "SiLU",
            "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
            "AdaptiveMaxPool2d", "Dropout", "Dropout2d", "Flatten", "Identity", "ReLU6", "Hardsigmoid", "Hardswish", "Mish", "GroupNorm", "RMSNorm",
            "InstanceNorm1d", "InstanceNorm2d", "Conv3d", "BatchNorm3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d")
    table = {getattr(tnn, name): (getattr(nn, name), {}) for name in same}
    table[tnn.MultiheadAttention] = (nn.MultiheadAttention, {
        "bias": lambda m: m.in_proj_bias is not None,
        "add_bias_kv": lambda m: m.bias_k is not None,
    })
    for name in ("LSTM", "GRU"):  # their ``bias`` attribute is the flag itself, not a parameter
        table[getattr(tnn, name)] = (getattr(nn, name), {"bias": lambda m: bool(m.bias)})
    return table


def convert_layer(torch_layer, fx_class, overrides):
    """The fxkit layer equivalent to ``torch_layer``, with its weights and training flag."""
    kwargs = {}
    for name, param in inspect.signature(fx_class.__init__).parameters.items():
        if name in _SKIPPED or name.startswith("_") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in overrides:
            kwargs[name] = overrides[name](torch_layer)
        elif hasattr(torch_layer, name):
            value = getattr(torch_layer, name)
            kwargs[name] = (value is not None) if name == "bias" else _plain(value)
    layer = fx_class(**kwargs)
    load_torch_state_dict(layer, torch_layer.state_dict())
    return layer.train(torch_layer.training)


def _plain(value):
    """torch.Size and other tuple subclasses as plain tuples."""
    return tuple(value) if isinstance(value, tuple) else value


def load_torch_state_dict(module, state_dict, strict=True):
    """Load a PyTorch ``state_dict`` into a matching fxkit module.

    fxkit layers keep PyTorch's parameter names and layouts, so the keys and
    shapes match one for one; torch tensors are converted to numpy here (torch
    itself is not imported).

    Args:
        module: the fxkit module (same architecture as the torch model).
        state_dict: ``torch_model.state_dict()`` (torch tensors or numpy arrays).
        strict: refuse missing or unexpected keys.

    Returns:
        ``IncompatibleKeys(missing_keys, unexpected_keys)``.

    Example:
        >>> model = fxkit.models.resnet18()
        >>> fxkit.load_torch_state_dict(model, torch_resnet18.state_dict())
    """
    arrays = {key: to_numpy(value, key) for key, value in state_dict.items()}
    return module.load_state_dict(arrays, strict=strict)


def to_numpy(value, what="a tensor"):
    """A torch tensor (any device, no gradient) or array-like as a numpy array."""
    if hasattr(value, "detach"):
        value = value.detach()
        if hasattr(value, "cpu"):
            value = value.cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            raise DTypeError(f"{what}: bfloat16 torch tensors have no numpy form; convert the model with "
                             f".float() first")
        return value.numpy().copy()
    return np.asarray(value)
