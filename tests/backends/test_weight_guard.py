"""A compiled module follows its parameters after they change: optimizer steps, load_state_dict.

Regression: compiled numba code packed conv weights once per array and went
on using the packing after an optimizer step wrote the weights in place, and
constant folding kept ``w.t()`` of the first weights; training through the
compiled grad graph silently diverged from eager. The reference is the
eager model, run in float64 numpy terms on the same weights.
"""
import numpy as np
import pytest

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.nn import functional as F
from fxkit.optim import SGD
from fxkit.transforms import grad

BACKENDS = ["numpy", "numba"]


class Folded(nn.Module):
    """Reads its weight only through sub-graphs constant folding precomputes (``(2 w)^T``, ``exp(b)``)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(5, 4))
        self.b = nn.Parameter(fxkit.randn(5))

    def forward(self, x):
        return x @ (self.w * 2.0).t() + self.b.exp()


def _reference(module, x):
    w, b = module.w.numpy().astype(np.float64), module.b.numpy().astype(np.float64)
    return x.numpy().astype(np.float64) @ (2 * w).T + np.exp(b)


def _compiled_folded(backend):
    """``(model, x, compiled model)`` of a fresh `Folded`."""
    fxkit.manual_seed(0)
    model = Folded()
    x = fxkit.randn(3, 4)
    return model, x, fxkit.compile(model, backend=backend, example_inputs=[x])


@pytest.mark.parametrize("backend", BACKENDS)
def test_folded_constants_follow_optimizer_steps(backend):
    model, x, compiled = _compiled_folded(backend)
    assert compiled.graph_module.folded_constants, "the test needs folded constants"
    opt = SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        np.testing.assert_allclose(compiled(x).numpy(), _reference(model, x), rtol=1e-5, atol=1e-5)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    assert compiled.stats.compilations == 1  # recomputed in place, not compiled again


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_state_dict_reaches_compiled_code(backend):
    model, x, compiled = _compiled_folded(backend)
    compiled(x)
    new = {"w": np.full((5, 4), 0.5, np.float32), "b": np.zeros(5, np.float32)}
    model.load_state_dict(new)
    np.testing.assert_allclose(compiled(x).numpy(), _reference(model, x), rtol=1e-5, atol=1e-5)
    model.load_state_dict({k: v + 1 for k, v in new.items()}, assign=True)  # rebinds the arrays
    np.testing.assert_allclose(compiled(x).numpy(), _reference(model, x), rtol=1e-5, atol=1e-5)


class WithLoss(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, target):
        return F.nll_loss(self.net(x), target)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_through_compiled_grad_matches_eager(backend):
    """The digits Net's convs go through packed weights on numba; three SGD steps on both sides."""
    fxkit.manual_seed(0)
    net = fxkit.models.get("digits_net")[0].eval()
    fxkit.manual_seed(0)
    eager = fxkit.models.get("digits_net")[0].eval()
    x = fxkit.randn(16, 1, 8, 8)
    y = fxkit.from_numpy(np.arange(16) % 10)
    run = fxkit.compile(grad(WithLoss(net), example_inputs=[x, y]), backend=backend, example_inputs=[x, y])
    opt, eager_opt = SGD(net.parameters(), lr=0.5), SGD(eager.parameters(), lr=0.5)
    for _ in range(3):
        loss, grads = run(x, y)
        for name, p in net.named_parameters():
            p.grad = grads["net." + name]
        opt.step()
        eager_opt.zero_grad()
        eager_loss = F.nll_loss(eager(x), y)
        eager_loss.backward()
        eager_opt.step()
        assert float(loss) == pytest.approx(float(eager_loss), rel=1e-5)
    for (name, p), q in zip(net.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_delegate_compiles_again_after_a_write():
    """onnxruntime holds copies of the weights: a written parameter makes its session stale."""
    pytest.importorskip("onnxruntime")
    fxkit.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    x = fxkit.randn(2, 4)
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[x])
    compiled(x)
    with fxkit.no_grad():
        model[0].weight.mul_(-1.5)
    reference = np.maximum(x.numpy() @ model[0].weight.numpy().T + model[0].bias.numpy(), 0)
    reference = reference @ model[2].weight.numpy().T + model[2].bias.numpy()
    np.testing.assert_allclose(compiled(x).numpy(), reference, rtol=1e-5, atol=1e-5)
    assert compiled.stats.compilations == 2


def test_conv_bn_folded_in_eval_mode_compiles_again_after_a_write():
    fxkit.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)).eval()
    x = fxkit.randn(1, 2, 6, 6)
    compiled = fxkit.compile(model, backend="numpy", example_inputs=[x])
    compiled(x)
    with fxkit.no_grad():
        model[0].weight.mul_(2.0)
        model[1].weight.add_(1.0)
    np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    assert compiled.stats.compilations == 2
