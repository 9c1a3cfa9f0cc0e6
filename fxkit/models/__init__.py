"""The model zoo: the seed talks' models, built on ``fxkit.nn``.

``get(name)`` builds a model (random weights from fxkit's generator, so
``fxkit.manual_seed`` makes it reproducible) in eval mode and returns it with
the shapes of example inputs, one per ``forward`` argument (float32).

Example:
    >>> model, shapes = fxkit.models.get("resnet18")
    >>> model(*(fxkit.randn(*s) for s in shapes)).shape
    (8, 1000)
"""
from fxkit.models.digits import DigitsNet
from fxkit.models.lenet import Net
from fxkit.models.lstm import LSTMCell
from fxkit.models.mlp import MLP
from fxkit.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet50
from fxkit.models.transformer import TransformerBlock


def _lstm_cell(input_size=128, hidden_size=256):
    return LSTMCell(input_size, hidden_size)


# name -> (constructor, example input shapes)
_ZOO = {
    "lenet": (Net, [(64, 1, 28, 28)]),
    "digits_net": (DigitsNet, [(64, 1, 8, 8)]),
    "mlp": (MLP, [(64, 784)]),
    "lstm_cell": (_lstm_cell, [(32, 128), (32, 256), (32, 256)]),
    "transformer_block": (TransformerBlock, [(8, 32, 128)]),
    "resnet18": (resnet18, [(8, 3, 64, 64)]),
    "resnet50": (resnet50, [(8, 3, 64, 64)]),
}


def names():
    """The names ``get`` accepts."""
    return list(_ZOO)


def get(name, **kwargs):
    """``(model, example_input_shapes)`` for a zoo model.

    Args:
        name: one of `names()`.
        **kwargs: constructor arguments (``num_classes=10`` for the ResNets, ...).

    Returns:
        The model in eval mode and a list of input shapes, one per forward
        argument; the shapes fit the default constructor arguments.
    """
    try:
        build, shapes = _ZOO[name]
    except KeyError:
        raise KeyError(f"no zoo model named {name!r}; available: {', '.join(_ZOO)}") from None
    return build(**kwargs).eval(), [tuple(s) for s in shapes]


__all__ = ["get", "names", "Net", "DigitsNet", "MLP", "LSTMCell", "TransformerBlock", "ResNet", "BasicBlock",
           "Bottleneck", "resnet18", "resnet50"]
