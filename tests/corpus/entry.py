"""One corpus model: the torch module, how to make its inputs, and which input dims are the batch.

Random initialisation leaves many library models degenerate (efficientnet's
logits near 1e-14, inception's near 1e12, ViT's zero classifier head, convnext's
1e-6 layer scales that hide every block behind its residual), and a comparison
against such outputs means nothing. ``make_nondegenerate`` fixes that the way
a trained model would look: near-zero parameters get small random values, and
batch-norm statistics come from one train-mode pass on random data.
``check_distinct`` proves the result: outputs are finite, of ordinary
magnitude, and differ between inputs and between the items of a batch.
"""
import dataclasses
from typing import Callable

import numpy as np
import torch

EXAMPLE_BATCH = 2
CALIBRATION_BATCH = 8


@dataclasses.dataclass(frozen=True)
class CorpusModel:
    """A library model built with random weights, in eval mode.

    ``make_inputs(batch, seed)`` returns the inputs, which bind to
    ``model.forward``'s parameters ``input_names`` by keyword (GPT-2 takes
    ``cache`` second, so its attention mask cannot go by position);
    ``batch_dims[i]`` is the batch dimension of input ``i``. ``keyword_call()``
    is the model as a module taking the inputs by position and returning its
    output tensors as a flat tuple, for routes that take positional inputs.
    """
    name: str
    model: torch.nn.Module
    make_inputs: Callable[[int, int], tuple]
    batch_dims: tuple
    input_names: tuple

    @property
    def library(self):
        return self.name.split("/")[0]

    @property
    def example_inputs(self):
        return self.make_inputs(EXAMPLE_BATCH, 0)

    def kwargs(self, inputs):
        """``inputs`` by the forward parameter names they bind to."""
        return dict(zip(self.input_names, inputs))

    def __call__(self, *inputs):
        """The model's outputs on ``inputs`` as a flat tuple of float64 numpy arrays (no grad)."""
        with torch.no_grad():
            return flatten_outputs(self.model(**self.kwargs(inputs)))

    def keyword_call(self):
        return KeywordCall(self.model, self.input_names)


class KeywordCall(torch.nn.Module):
    """Calls ``model`` with its inputs by keyword and returns its output tensors as a flat tuple.

    torch.onnx.export's TorchScript route binds positional inputs and ``kwargs``
    against the whole forward signature with its defaults filled in, which
    transformers 5 models refuse (``got multiple values for argument
    'use_cache'``) or turn into extra graph inputs (``logits_to_keep``); a call
    by keyword avoids both. The outputs are ``flatten_outputs``'s, in order; the
    state_dict keys gain the prefix ``model.``.
    """

    def __init__(self, model, names):
        super().__init__()
        self.model = model
        self.names = tuple(names)
        # NOTE: a new Module starts in training mode, and exporters restore the wrapper's mode on the
        # whole tree afterwards: it must start in the model's mode or the corpus model ends up training.
        self.train(model.training)

    def forward(self, *inputs):
        return tuple(_tensors(self.model(**dict(zip(self.names, inputs)))))


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [t for item in value if item is not None for t in _tensors(item)]


def flatten_outputs(value):
    """Tensors of a model output (tensor, tuple, list, dict or transformers ModelOutput) as float64 arrays."""
    return tuple(t.detach().to(torch.float64).numpy() for t in _tensors(value))


def image_inputs(channels, size):
    """A ``make_inputs`` for one float image batch: NCHW for an int ``size``, N C *size for a tuple
    (``(frames, height, width)`` for a video model)."""
    spatial = (size, size) if isinstance(size, int) else tuple(size)

    def make(batch, seed):
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, channels, *spatial, generator=generator),)
    return make


def token_inputs(vocab, length, names=("input_ids",)):
    """A ``make_inputs`` for token ids (and attention masks, named ``*mask``; padding at the end of item 1)."""
    def make(batch, seed):
        generator = torch.Generator().manual_seed(seed)
        out = []
        for name in names:
            if name.endswith("mask"):
                mask = torch.ones(batch, length, dtype=torch.int64)
                if batch > 1:
                    mask[1, length - length // 4:] = 0
                out.append(mask)
            else:
                out.append(torch.randint(0, vocab, (batch, length), generator=generator))
        return tuple(out)
    return make


def make_nondegenerate(model, make_inputs, input_names, seed=0):
    """Give ``model`` the weights a trained model would have in spirit, then put it in eval mode.

    Parameters that are all near zero (zero-initialised heads and biases, 1e-6
    layer scales) get small random values; batch-norm running statistics are
    set exactly (momentum None after a reset) from one train-mode pass on
    random inputs, so eval mode sees normalised activations.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.numel() and float(param.abs().max()) < 1e-4:
                std = 0.02 if param.dim() > 1 else 0.1
                param.copy_(torch.randn(param.shape, generator=generator) * std)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if norms:
            saved = [m.momentum for m in norms]
            for m in norms:
                m.reset_running_stats()
                m.momentum = None
            model.train()
            model(**dict(zip(input_names, make_inputs(CALIBRATION_BATCH, seed + 1000))))
            for m, momentum in zip(norms, saved):
                m.momentum = momentum
    return model.eval()


def check_distinct(entry, rtol=1e-3):
    """Raise AssertionError unless ``entry``'s outputs are finite, ordinary in size and input-dependent.

    Two input sets must give outputs differing by more than ``rtol`` of their
    magnitude, and so must two items of one batch: a model whose output does not
    depend on its input cannot catch a wrong import.
    """
    first = entry(*entry.make_inputs(EXAMPLE_BATCH, 0))
    second = entry(*entry.make_inputs(EXAMPLE_BATCH, 1))
    main = first[0]
    assert all(np.all(np.isfinite(a)) for a in first), f"{entry.name}: non-finite outputs"
    scale = float(np.max(np.abs(main)))
    assert 1e-3 < scale < 1e4, f"{entry.name}: output magnitude {scale:.3g} is degenerate"
    change = float(np.max(np.abs(main - second[0]))) / scale
    assert change > rtol, f"{entry.name}: outputs change by only {change:.3g} between inputs"
    batch_dim = 0
    items = np.moveaxis(main, batch_dim, 0)
    spread = float(np.max(np.abs(items[0] - items[1]))) / scale
    assert spread > rtol, f"{entry.name}: batch items differ by only {spread:.3g}"
