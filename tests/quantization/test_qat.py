"""Quantization-aware training: fake quantization and its straight-through gradient against
PyTorch's, the graph prepare_qat builds, and QAT fine-tuning from the post-training-quantized
MLP, which must not lose accuracy relative to PTQ."""
import re
import warnings

import numpy as np
import pytest

import fxkit
import fxkit.models  # noqa: F401  (fxkit.models.MLP)
from fxkit.nn import functional as F
from fxkit.transforms.quantize import (FakeQuantize, calibrate, convert, enable_observer, fake_quantize, prepare,
                                       prepare_qat)


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield torch


def test_fake_quantize_forward_and_straight_through_gradient_match_torch(torch, rng):
    x_np = (rng.standard_normal(500) * 2).astype(np.float32)
    scale, zero_point = float(np.float32(0.0123)), 17
    x = fxkit.from_numpy(x_np.copy()).requires_grad_()
    y = fake_quantize(x, scale, zero_point, fxkit.int8)
    weights = rng.standard_normal(500).astype(np.float32)
    (y * fxkit.from_numpy(weights)).sum().backward()
    tx = torch.from_numpy(x_np.copy()).requires_grad_()
    ty = torch.fake_quantize_per_tensor_affine(tx, scale, zero_point, -128, 127)
    (ty * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    clamped = (x_np / scale + zero_point > 127.5) | (x_np / scale + zero_point < -128.5)
    assert clamped.any() and (x.grad.numpy()[clamped] == 0).all()


def test_per_channel_fake_quantize_matches_torch(torch, rng):
    w_np = (rng.standard_normal((4, 6)) * 3).astype(np.float32)
    scales = np.array([0.01, 0.02, 0.03, 0.05], np.float32)
    zeros = np.array([0, 3, -2, 0], np.int32)
    fq = fake_quantize(fxkit.from_numpy(w_np).requires_grad_(), fxkit.from_numpy(scales), fxkit.from_numpy(zeros),
                       fxkit.int8, 0)
    tw = torch.from_numpy(w_np).requires_grad_()
    expected = torch.fake_quantize_per_channel_affine(tw, torch.from_numpy(scales), torch.from_numpy(zeros), 0,
                                                      -128, 127)
    np.testing.assert_allclose(fq.detach().numpy(), expected.detach().numpy(), rtol=0, atol=1e-6)


def test_fake_quantize_value_is_exactly_the_quantized_grid(rng):
    x = fxkit.from_numpy(rng.standard_normal(300).astype(np.float32)).requires_grad_()
    q = fxkit.quantize_per_tensor(x.detach(), 0.05, -3, fxkit.int8).dequantize()
    np.testing.assert_array_equal(fake_quantize(x, 0.05, -3, fxkit.int8).detach().numpy(), q.numpy())


def test_prepare_qat_fake_quantizes_weights_and_activations_and_trains(rng):
    fxkit.manual_seed(0)
    model = fxkit.models.MLP(8, (16,), 4).eval()
    original = model.layers[0].weight.numpy().copy()
    qat = prepare_qat(model)
    assert qat.training
    text = str(qat.graph)
    assert re.search(r"%layers_0_weight_fake_quant += call\[self.layers_0_weight_fake_quant\]\(%layers_0_weight\)",
                     text), text
    assert re.search(r"%layers_0_qat += call\[linear\]\(%activation_post_process_0, %layers_0_weight_fake_quant, "
                     r"%layers_0_bias\)", text), text
    fake_quants = [m for m in qat.modules() if isinstance(m, FakeQuantize)]
    assert len(fake_quants) == 5  # 2 weights, 3 activations
    optimizer = fxkit.optim.SGD(qat.parameters(), lr=0.1)
    x = fxkit.from_numpy(rng.standard_normal((32, 8)).astype(np.float32))
    y = fxkit.from_numpy(rng.integers(0, 4, 32))
    for _ in range(3):
        loss = F.cross_entropy(qat(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained = qat.get_parameter("layers.0.weight").numpy()
    assert not np.array_equal(trained, original)
    np.testing.assert_array_equal(model.layers[0].weight.numpy(), original)  # the float model is untouched
    quantized = convert(qat, report=False)
    assert quantized.conversion_report.quantized == ["layers.0", "head"]


@pytest.mark.slow
def test_qat_fine_tuning_from_ptq_does_not_lose_accuracy(digits, sklearn_mlp):
    batches = digits.batches()
    prepared = prepare(sklearn_mlp)
    calibrate(prepared, batches, progress=False)
    ptq = digits.accuracy(convert(prepared, report=False))

    qat = prepare_qat(sklearn_mlp)
    calibrate(qat, batches, progress=False)  # start from the post-training ranges
    optimizer = fxkit.optim.SGD(qat.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    for epoch in range(3):
        order = rng.permutation(len(digits.train_x))
        for i in range(0, len(order), 32):
            batch = order[i:i + 32]
            loss = F.cross_entropy(qat(fxkit.from_numpy(digits.train_x[batch])),
                                   fxkit.from_numpy(digits.train_y[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch == 1:
            enable_observer(qat, False)  # freeze the ranges for the last epoch
    quantized = convert(qat.eval(), report=False)
    fake = digits.accuracy(qat)
    int8 = digits.accuracy(quantized)
    assert int8 >= ptq, f"QAT int8 {int8:.2f}% < PTQ {ptq:.2f}%"
    assert abs(int8 - fake) <= 0.5  # the integer model computes what training saw
