"""The model corpus: real models built from torchvision, timm and transformers with random weights.

``build(name)`` returns a ``CorpusModel`` (torch module in eval mode, input
maker, batch dims); ``NAMES`` lists all 26 in order; ``FAST`` is the
representative subset the unmarked tests use (a plain convnet, a
depthwise/squeeze-excite convnet, a masked encoder and a causal decoder).
``build`` also builds the vision generality set (`generality_vision`: models
outside this list that check the import is not built for it). ``build`` needs
torch and the three libraries (the ``oracle`` extra; this module imports none
of them, so a test can call ``require_libraries`` first);
torchvision is imported through ``torchvision_import`` (see there why).
"""
import functools

TORCHVISION_ARCHS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "vgg11",
                     "densenet121", "squeezenet1_0", "shufflenet_v2_x1_0", "regnet_y_400mf", "mnasnet0_5",
                     "googlenet", "inception_v3", "convnext_tiny", "vit_b_16", "swin_t")
TIMM_ARCHS = ("resnet18", "efficientnet_b0", "vit_tiny_patch16_224", "convnext_atto")
TRANSFORMERS_ARCHS = ("BertModel", "DistilBertModel", "GPT2LMHeadModel", "LlamaForCausalLM",
                      "T5ForConditionalGeneration", "ViTModel")

NAMES = (tuple(f"torchvision/{a}" for a in TORCHVISION_ARCHS) + tuple(f"timm/{a}" for a in TIMM_ARCHS)
         + tuple(f"transformers/{a}" for a in TRANSFORMERS_ARCHS))

FAST = ("torchvision/resnet18", "torchvision/mobilenet_v3_small", "transformers/BertModel",
        "transformers/LlamaForCausalLM")


@functools.lru_cache(maxsize=None)
def build(name):
    """The corpus model ``name`` ("library/arch"), built once per process."""
    from tests.corpus import generality_vision

    library, _, arch = name.partition("/")
    if name not in NAMES and name not in generality_vision.NAMES:
        raise KeyError(f"unknown corpus model {name!r}; known: {', '.join(NAMES)} "
                       f"and the generality set's {', '.join(generality_vision.NAMES)}")
    if library == "torchvision":
        from tests.corpus.vision import build_torchvision
        return build_torchvision(arch)
    if library == "timm":
        from tests.corpus.vision import build_timm
        return build_timm(arch)
    from tests.corpus.text import build_transformers
    return build_transformers(arch)


def require_libraries():
    """Skip the calling test module unless torch, torchvision, timm and transformers all import.

    Use it instead of ``pytest.importorskip("torchvision")``, which imports
    torchvision without the shim of ``torchvision_import``.
    """
    import pytest

    pytest.importorskip("torch")
    from tests.corpus.torchvision_import import import_torchvision

    try:
        import_torchvision()
    except ImportError as error:
        pytest.skip(f"the model corpus needs torchvision: {error}", allow_module_level=True)
    pytest.importorskip("timm")
    pytest.importorskip("transformers")
