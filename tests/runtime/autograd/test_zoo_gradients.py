"""Gradients of every zoo model against PyTorch's: same weights, same input, same loss,
relative error below 1e-4 in float32 (the ResNets in float64) for every parameter and the inputs.

Eval mode (dropout would draw differently); BatchNorm's training mode is checked on
ResNet-18 and a BatchNorm2d layer, where the batch statistics enter the gradient.
"""
import numpy as np
import pytest

import fxkit
from fxkit import models
from fxkit.nn import functional as F

torch = pytest.importorskip("torch")

from tests.models import torch_reference as ref  # noqa: E402
from tests.models.test_digits import TorchDigitsNet  # noqa: E402  (DigitsNet's reference lives with its test)
from tests.nn.torch_compare import copy_state, randomize_batchnorm  # noqa: E402


# zoo name -> (torch constructor, fxkit constructor arguments, input shapes)
REFERENCES = {
    "lenet": (ref.Net, {}, [(4, 1, 28, 28)]),
    "digits_net": (TorchDigitsNet, {}, [(8, 1, 8, 8)]),
    "mlp": (ref.MLP, {}, [(4, 784)]),
    "lstm_cell": (lambda: ref.LSTMCell(128, 256), {}, [(4, 128), (4, 256), (4, 256)]),
    "transformer_block": (ref.TransformerBlock, {}, [(2, 16, 128)]),
    "resnet18": (ref.resnet18, {}, [(2, 3, 64, 64)]),
    "resnet50": (ref.resnet50, {}, [(1, 3, 64, 64)]),
}
SLOW = {"resnet18", "resnet50"}
TOLERANCE = 1e-4


def _names():
    return [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in models.names()]


def _pair(name):
    make_ref, kwargs, shapes = REFERENCES[name]
    torch.manual_seed(0)
    reference = make_ref()
    randomize_batchnorm(reference)
    with torch.no_grad():  # torch zero-initialises these biases: make their gradients non-trivial paths
        for key, p in reference.named_parameters():
            if key.endswith("in_proj_bias") or key.endswith("out_proj.bias"):
                p.copy_(torch.rand(p.shape) * 0.2 - 0.1)
    model, _ = models.get(name, **kwargs)
    copy_state(model, reference)
    return model, reference, shapes


def _loss(out):
    return sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()


def _rel_err(got, expected):
    got = np.asarray(got.numpy(), np.float64)
    expected = expected.detach().numpy().astype(np.float64)
    assert got.shape == expected.shape
    return np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)


def _compare(model, reference, arrays, loss=_loss, torch_loss=_loss):
    xs = [fxkit.from_numpy(a).requires_grad_() for a in arrays]
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    loss(model(*xs)).backward()
    torch_loss(reference(*ts)).backward()
    expected = dict(reference.named_parameters())
    errors = {name: _rel_err(p.grad, expected[name].grad) for name, p in model.named_parameters()}
    errors.update({f"input {i}": _rel_err(x.grad, t.grad) for i, (x, t) in enumerate(zip(xs, ts))})
    worst = max(errors, key=errors.get)
    assert errors[worst] < TOLERANCE, f"gradient of {worst}: relative error {errors[worst]:.3g} >= {TOLERANCE}"
    assert len(errors) == len(expected) + len(xs)


def test_every_zoo_model_has_a_reference():
    assert set(models.names()) <= set(REFERENCES), "add the new zoo model's PyTorch reference to REFERENCES"


@pytest.mark.parametrize("name", _names())
def test_zoo_gradients_match_torch(name, rng):
    model, reference, shapes = _pair(name)
    model.eval()
    reference.eval()
    dtype = np.float32
    if name in SLOW:
        # NOTE: in float64. A ResNet has ~10^6 ReLU inputs: on ~3% of random float32 inputs one lies
        # within rounding of zero, lands on different sides of the kink in two computations (fxkit
        # and PyTorch, or either and float64) and moves some gradient by ~3e-3 relative.
        model.double()
        reference.double()
        dtype = np.float64
    _compare(model, reference, [(rng.random(s) * 2 - 1).astype(dtype) for s in shapes])


def test_classifier_loss_gradients_match_torch(rng):
    model, reference, shapes = _pair("lenet")
    model.eval()
    reference.eval()
    labels = rng.integers(0, 10, size=shapes[0][0])
    _compare(model, reference, [(rng.random(shapes[0]) * 2 - 1).astype(np.float32)],
             loss=lambda out: F.nll_loss(out, fxkit.from_numpy(labels)),
             torch_loss=lambda out: torch.nn.functional.nll_loss(out, torch.from_numpy(labels)))


@pytest.mark.slow
def test_train_mode_batchnorm_gradients_match_torch_on_resnet18(rng):
    # NOTE: in float64. Through train-mode BatchNorm over few elements per channel (batch 4 at
    # 4x4 in layer3) float32 gradients of the two libraries drift apart by up to ~2% on some
    # draws from summation order alone; float64 checks the formulas, not the rounding.
    model, reference, _ = _pair("resnet18")
    model.double().train()
    reference.double().train()
    _compare(model, reference, [rng.random((4, 3, 64, 64)) * 2 - 1])
    np.testing.assert_allclose(model.layer1[0].bn1.running_mean.numpy(),
                               reference.layer1[0].bn1.running_mean.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shape", [(6, 4, 5, 5), (16, 3)])
def test_train_mode_batchnorm_layer_matches_torch(rng, shape):
    layer = fxkit.nn.BatchNorm2d(shape[1]) if len(shape) == 4 else fxkit.nn.BatchNorm1d(shape[1])
    reference = torch.nn.BatchNorm2d(shape[1]) if len(shape) == 4 else torch.nn.BatchNorm1d(shape[1])
    randomize_batchnorm(reference)
    copy_state(layer, reference)
    weights = (rng.random(shape) * 2 - 1).astype(np.float32)
    _compare(layer, reference, [(rng.random(shape) * 4 - 2).astype(np.float32)],
             loss=lambda out: (out * fxkit.from_numpy(weights)).sum(),
             torch_loss=lambda out: (out * torch.from_numpy(weights)).sum())
