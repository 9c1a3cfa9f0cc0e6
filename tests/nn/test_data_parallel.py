"""DataParallel: threads over devices in one process give the outputs and the parameter gradients of
the model on the whole batch (cpu devices here; a cpu model with a cuda replica under the cuda mark)."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn


def net():
    fxkit.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def batch(n=10):
    rng = np.random.default_rng(0)
    return fxkit.from_numpy(rng.standard_normal((n, 5))), fxkit.from_numpy(rng.integers(0, 3, n))


def gradients(model, x, y):
    model.zero_grad()
    out = model(x)
    F.cross_entropy(out, y).backward()
    return out.detach().numpy(), [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("devices,n", [(["cpu", "cpu"], 10), (["cpu", "cpu", "cpu"], 10), (["cpu"] * 4, 3)])
def test_replicas_on_threads_equal_the_model_on_the_whole_batch(devices, n):
    x, y = batch(n)
    model = net()
    want_out, want_grads = gradients(model, x, y)
    got_out, got_grads = gradients(nn.DataParallel(model, device_ids=devices), x, y)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-12)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)


def test_outputs_that_are_tuples_are_gathered_piecewise_and_scalars_stacked():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 2).double()

        def forward(self, x):
            h = self.fc(x)
            return h, h.sum()

    x, _ = batch(6)
    model = Two()
    h, total = nn.DataParallel(model, device_ids=["cpu", "cpu"])(x)
    np.testing.assert_allclose(h.detach().numpy(), model(x)[0].detach().numpy())
    assert total.shape == (2,)
    # the replicas' partial sums add in another order than one sum over the batch
    magnitude = np.abs(h.detach().numpy()).sum()
    np.testing.assert_allclose(total.detach().numpy().sum(), model(x)[1].item(), rtol=1e-6, atol=1e-6 * magnitude)


def test_from_nn_parallel_and_errors_name_the_replica():
    from fxkit.nn.parallel import DataParallel

    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        DataParallel(Boom(), device_ids=["cpu", "cpu"])(fxkit.ones(4, 2))
    assert any("replica on cpu" in note for note in info.value.__notes__)


@pytest.mark.cuda
def test_a_cuda_replica_sends_its_gradients_back_to_the_cpu_model():
    if not fxkit.cuda.is_available():
        pytest.skip("needs a GPU with cupy")
    x, y = batch(10)
    model = net()
    want_out, want_grads = gradients(model, x, y)
    got_out, got_grads = gradients(nn.DataParallel(model, device_ids=["cpu", "cuda:0"], output_device="cpu"), x, y)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-10)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-12)
