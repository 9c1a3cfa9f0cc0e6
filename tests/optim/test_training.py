"""Optimizers driven by autograd: a few training steps of a small network match PyTorch's,
and the in-place update is seen by autograd like PyTorch's."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import AutogradError, DTypeError
from fxkit.nn import functional as F


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(6, 16), lib.nn.ReLU(), lib.nn.Linear(16, 4))


@pytest.mark.parametrize("name, kwargs", [("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
                                          ("Adam", {"lr": 0.01, "amsgrad": True}),
                                          ("AdamW", {"lr": 0.01, "weight_decay": 0.1})])
def test_training_steps_match_torch(name, kwargs, rng):
    torch = pytest.importorskip("torch")
    from tests.nn.torch_compare import copy_state

    reference = _mlp(torch)
    model = _mlp(fxkit)
    copy_state(model, reference)
    fx_opt = getattr(fxkit.optim, name)(model.parameters(), **kwargs)
    th_opt = getattr(torch.optim, name)(reference.parameters(), **kwargs)
    fx_sched = fxkit.optim.lr_scheduler.StepLR(fx_opt, step_size=2, gamma=0.5)
    th_sched = torch.optim.lr_scheduler.StepLR(th_opt, step_size=2, gamma=0.5)
    for _ in range(5):
        x = rng.standard_normal((8, 6)).astype(np.float32)
        y = rng.integers(0, 4, size=8)
        fx_opt.zero_grad()
        F.cross_entropy(model(fxkit.from_numpy(x)), fxkit.from_numpy(y)).backward()
        fx_opt.step()
        fx_sched.step()
        th_opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        th_opt.step()
        th_sched.step()
    for (key, p), q in zip(model.named_parameters(), reference.parameters()):
        want = q.detach().numpy()
        err = np.linalg.norm(p.numpy() - want) / np.linalg.norm(want)
        assert err < 1e-5, f"{key}: relative error {err:.3g}"


def test_step_is_not_recorded_and_counts_as_a_write(rng):
    model = nn.Linear(4, 3)
    x = fxkit.from_numpy(rng.standard_normal((5, 4)).astype(np.float32)).requires_grad_()
    opt = fxkit.optim.SGD(model.parameters(), lr=0.1)
    stale = model(x).sum()
    (model(x) ** 2).sum().backward()
    opt.step()
    assert all(p.requires_grad and p.grad_fn is None for p in model.parameters())  # still leaves
    with pytest.raises(AutogradError, match="modified by an inplace operation"):
        stale.backward()


def test_gradient_of_another_dtype_is_refused():
    p = nn.Parameter(fxkit.ones(2))
    p.grad = fxkit.ones(2, dtype=fxkit.float64)
    with pytest.raises(DTypeError, match="a float64 gradient on cpu was set on a float32 parameter on cpu; "
                                         r"convert it with .to\(p.dtype\)"):
        fxkit.optim.SGD([p], lr=0.1).step()
