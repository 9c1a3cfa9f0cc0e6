"""The zoo against PyTorch: same module tree, parameter order and state_dict keys as
the reference models, and with PyTorch's weights the same outputs (relative error
below 1e-5 in float32, eval mode)."""
import numpy as np
import pytest

import fxkit
from fxkit import models

torch = pytest.importorskip("torch")

from tests.models import torch_reference as ref  # noqa: E402
from tests.nn.torch_compare import assert_close, copy_state, randomize_batchnorm  # noqa: E402

# name -> (fxkit constructor, torch constructor, input shapes for the comparison)
PAIRS = {
    "lenet": (models.Net, ref.Net, [(4, 1, 28, 28)]),
    "mlp": (models.MLP, ref.MLP, [(4, 1, 28, 28)]),
    "lstm_cell": (lambda: models.LSTMCell(32, 48), lambda: ref.LSTMCell(32, 48), [(4, 32), (4, 48), (4, 48)]),
    "transformer_block": (models.TransformerBlock, ref.TransformerBlock, [(2, 16, 128)]),
    "resnet18": (models.resnet18, ref.resnet18, [(2, 3, 64, 64)]),
    "resnet50": (models.resnet50, ref.resnet50, [(1, 3, 64, 64)]),
}
SLOW = {"resnet18", "resnet50"}


def _params(name):
    return pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])


def _pair(name):
    make_fx, make_ref, shapes = PAIRS[name]
    torch.manual_seed(0)
    reference = make_ref()
    randomize_batchnorm(reference)
    with torch.no_grad():  # torch zero-initialises these biases: make them matter
        for key, p in reference.named_parameters():
            if key.endswith("in_proj_bias") or key.endswith("out_proj.bias"):
                p.copy_(torch.rand(p.shape) * 0.2 - 0.1)
    return make_fx(), reference, shapes


@pytest.mark.parametrize("name", [_params(n) for n in PAIRS])
def test_structure_matches_torch(name):
    model, reference, _ = _pair(name)
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in reference.named_parameters()]
    assert list(model.state_dict()) == list(reference.state_dict())
    assert [n for n, _ in model.named_modules()] == [n for n, _ in reference.named_modules()]


@pytest.mark.parametrize("name", [_params(n) for n in PAIRS])
def test_outputs_match_torch_with_its_weights(name, rng):
    model, reference, shapes = _pair(name)
    copy_state(model, reference)
    model.eval()
    reference.eval()
    inputs = [(rng.random(s) * 2 - 1).astype(np.float32) for s in shapes]
    out = model(*(fxkit.from_numpy(a) for a in inputs))
    with torch.no_grad():
        expected = reference(*(torch.from_numpy(a) for a in inputs))
    if isinstance(expected, tuple):
        assert len(out) == len(expected)
        for o, e in zip(out, expected):
            assert_close(o, e, 1e-5)
    else:
        assert_close(out, expected, 1e-5)


def test_resnet_repr_matches_torch():
    assert repr(models.resnet18()) == repr(ref.resnet18())


def test_lenet_train_mode_uses_dropout(rng):
    model = models.Net()
    x = fxkit.from_numpy(rng.random((8, 1, 28, 28)).astype(np.float32))
    a, b = model(x).numpy(), model(x).numpy()
    assert not np.allclose(a, b)  # dropout active
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())


def test_resnet_num_classes_and_zero_init_residual():
    model = models.resnet18(num_classes=7, zero_init_residual=True)
    assert model.fc.out_features == 7
    assert not model.layer1[0].bn2.weight.numpy().any()
    assert models.resnet50(zero_init_residual=True).layer4[2].bn3.weight.numpy().max() == 0


@pytest.mark.slow
def test_registry_names_and_example_shapes():
    assert models.names() == ["lenet", "digits_net", "mlp", "lstm_cell", "transformer_block", "resnet18",
                             "resnet50"]
    for name in ("lenet", "mlp", "lstm_cell", "transformer_block", "resnet18"):
        model, shapes = models.get(name)
        assert not model.training
        out = model(*(fxkit.randn(*s) for s in shapes))
        first = out[0] if isinstance(out, tuple) else out
        assert first.shape[0] == shapes[0][0] and first.dtype is fxkit.float32
    model, _ = models.get("resnet18", num_classes=10)
    assert model.fc.out_features == 10
    with pytest.raises(KeyError, match="no zoo model named 'vgg'; available: lenet"):
        models.get("vgg")


def test_manual_seed_makes_models_reproducible():
    fxkit.manual_seed(123)
    a = models.Net().state_dict()
    fxkit.manual_seed(123)
    b = models.Net().state_dict()
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    c = models.Net().state_dict()
    assert not np.array_equal(a["conv1.weight"].numpy(), c["conv1.weight"].numpy())
