"""SGD against torch.optim.SGD: every option, several steps, same parameters and gradients."""
import numpy as np
import pytest

import fxkit

torch = pytest.importorskip("torch")

from tests.optim.compare import assert_params_close, problem, run_both  # noqa: E402

CONFIGS = {
    "plain": {"lr": 0.1},
    "default_lr": {},
    "momentum": {"lr": 0.05, "momentum": 0.9},
    "dampening": {"lr": 0.05, "momentum": 0.8, "dampening": 0.3},
    "nesterov": {"lr": 0.05, "momentum": 0.9, "nesterov": True},
    "weight_decay": {"lr": 0.1, "weight_decay": 0.05},
    "maximize": {"lr": 0.1, "maximize": True},
    "everything": {"lr": 0.02, "momentum": 0.7, "weight_decay": 0.1, "nesterov": True, "maximize": True},
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_sgd_matches_torch(config, rng, device):
    init, grads = problem(rng)
    fx, th = run_both(fxkit.optim.SGD, torch.optim.SGD, init, grads, device, **config)
    assert_params_close(fx, th)


def test_sgd_param_groups_match_torch(rng):
    init, grads = problem(rng)
    groups = [{"lr": 0.2, "momentum": 0.5}, {"nesterov": True, "momentum": 0.9, "weight_decay": 0.01}]
    fx, th = run_both(fxkit.optim.SGD, torch.optim.SGD, init, grads, groups=groups, lr=0.05)
    assert_params_close(fx, th)


def test_sgd_changed_lr_midway_matches_torch(rng):
    init, grads = problem(rng)
    fx, th = run_both(fxkit.optim.SGD, torch.optim.SGD, init, grads[:3], lr=0.1, momentum=0.9)
    fx_opt = fxkit.optim.SGD(fx, lr=0.03, momentum=0.9)
    th_opt = torch.optim.SGD(th, lr=0.03, momentum=0.9)
    for g in grads[3:]:
        for p, a in zip(fx, g):
            p.grad = fxkit.from_numpy(a.copy())
        for p, a in zip(th, g):
            p.grad = torch.from_numpy(a.copy())
        fx_opt.step()
        th_opt.step()
    assert_params_close(fx, th)


def test_sgd_on_parameters_larger_than_one_chunk_matches_torch(rng):
    """Updates run slice by slice (fxkit.optim.optimizer.chunks) on large parameters: same result."""
    from fxkit.optim.optimizer import CHUNK

    init, grads = problem(rng, shapes=[(3, CHUNK // 2 + 5), (7,)], steps=3)
    config = {"lr": 0.02, "momentum": 0.7, "weight_decay": 0.1, "nesterov": True, "maximize": True}
    fx, th = run_both(fxkit.optim.SGD, torch.optim.SGD, init, grads, **config)
    assert_params_close(fx, th)


MOMENTUM_CONFIGS = {name: config for name, config in CONFIGS.items() if config.get("momentum")}


@pytest.mark.parametrize("config", MOMENTUM_CONFIGS.values(), ids=MOMENTUM_CONFIGS.keys())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", ["calling thread", "numba threads"])
def test_fused_update_of_a_large_parameter_is_the_array_form_bit_for_bit(config, dtype, threads, rng, monkeypatch):
    """A parameter of FUSED_MIN elements or more with momentum is updated by one numba loop (fxkit.optim.fused_sgd); it rounds
    after every operation as the array form does, so four steps of each give identical bits (and both match
    torch above), on the calling thread and on numba's threads."""
    pytest.importorskip("numba")
    from fxkit.optim import fused_sgd, sgd

    monkeypatch.setattr(fused_sgd, "_SHARED_POOL", threads == "numba threads")

    size = sgd.FUSED_MIN
    start = rng.standard_normal(size).astype(dtype)
    grads = [rng.standard_normal(size).astype(dtype) for _ in range(4)]
    results = []
    for fused_min in (size, size + 1):  # the fused loop, then the array form
        p = fxkit.nn.Parameter(fxkit.from_numpy(start.copy()))
        opt = fxkit.optim.SGD([p], **config)
        original, sgd.FUSED_MIN = sgd.FUSED_MIN, fused_min
        try:
            for g in grads:
                p.grad = fxkit.from_numpy(g.copy())
                opt.step()
        finally:
            sgd.FUSED_MIN = original
        results.append(p.numpy())
    assert not np.array_equal(results[0], start)
    np.testing.assert_array_equal(results[0], results[1])
