"""torchvision and timm image classifiers of the corpus, at small input sizes.

Each builder returns a ``CorpusModel`` with the library's own architecture
and default head, random weights made non-degenerate (see ``entry``). Sizes
are the smallest that keep every stage non-trivial: swin_t at 64 pads its
7x7 windows, inception_v3 needs at least 75 pixels.
"""
import inspect

import torch

from tests.corpus import generality_vision
from tests.corpus.entry import CorpusModel, image_inputs, make_nondegenerate
from tests.corpus.torchvision_import import import_torchvision

# name -> (input size, builder keyword arguments)
TORCHVISION = {
    "resnet18": (64, {}),
    "resnet50": (64, {}),
    "mobilenet_v2": (64, {}),
    "mobilenet_v3_small": (64, {}),
    "efficientnet_b0": (64, {}),
    "vgg11": (32, {}),
    "densenet121": (64, {}),
    "squeezenet1_0": (64, {}),
    "shufflenet_v2_x1_0": (64, {}),
    "regnet_y_400mf": (64, {}),
    "mnasnet0_5": (64, {}),
    "googlenet": (64, {"aux_logits": False, "init_weights": True}),
    "inception_v3": (80, {"aux_logits": False, "init_weights": True}),
    "convnext_tiny": (64, {}),
    "vit_b_16": (64, {"image_size": 64}),
    "swin_t": (64, {}),
}

# name -> (input size, timm.create_model keyword arguments)
TIMM = {
    "resnet18": (64, {}),
    "efficientnet_b0": (64, {}),
    "vit_tiny_patch16_224": (64, {"img_size": 64}),
    "convnext_atto": (64, {}),
}


def _finish(name, model, size):
    make_inputs = image_inputs(3, size)
    names = (next(iter(inspect.signature(model.forward).parameters)),)  # "x" in both libraries
    make_nondegenerate(model, make_inputs, names)
    return CorpusModel(name, model, make_inputs, (0,), names)


def _size(arch, corpus, generality):
    """The input size and keyword arguments of ``arch`` from the corpus table or the generality set's."""
    if arch in corpus:
        return corpus[arch]
    (channels, *spatial), kwargs = generality[arch]
    return tuple(spatial), kwargs


def build_torchvision(arch):
    """torchvision.models.<arch>(weights=None) at its corpus input size.

    ``arch`` may name a submodule's model (``"segmentation.fcn_resnet50"``, ``"video.r3d_18"``).
    """
    size, kwargs = _size(arch, TORCHVISION, generality_vision.TORCHVISION)
    builder = import_torchvision().models
    for part in arch.split("."):
        builder = getattr(builder, part)
    torch.manual_seed(0)
    return _finish(f"torchvision/{arch}", builder(weights=None, **kwargs), size)


def build_timm(arch):
    """timm.create_model(arch, pretrained=False) at its corpus input size."""
    import_torchvision()  # NOTE: timm imports torchvision; it must come in through the shim first
    import timm

    size, kwargs = _size(arch, TIMM, generality_vision.TIMM)
    torch.manual_seed(0)
    return _finish(f"timm/{arch}", timm.create_model(arch, pretrained=False, **kwargs), size)
