"""Adam and AdamW against torch.optim: every option, several steps, same parameters and gradients."""
import pytest

import fxkit

torch = pytest.importorskip("torch")

from tests.optim.compare import assert_params_close, problem, run_both  # noqa: E402

CONFIGS = {
    "defaults": {},
    "lr": {"lr": 0.05},
    "betas": {"lr": 0.01, "betas": (0.5, 0.9)},
    "small_betas": {"lr": 0.01, "betas": (0.0, 0.3)},
    "eps": {"lr": 0.01, "eps": 1e-3},
    "weight_decay": {"lr": 0.01, "weight_decay": 0.1},
    "no_weight_decay": {"lr": 0.01, "weight_decay": 0},
    "amsgrad": {"lr": 0.01, "amsgrad": True},
    "maximize": {"lr": 0.01, "maximize": True},
    "everything": {"lr": 0.02, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.2, "amsgrad": True,
                   "maximize": True},
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_matches_torch(name, config, rng, device):
    init, grads = problem(rng, steps=8)
    fx, th = run_both(getattr(fxkit.optim, name), getattr(torch.optim, name), init, grads, device, **config)
    assert_params_close(fx, th)


def test_adam_decoupled_weight_decay_is_adamw(rng):
    init, grads = problem(rng)

    def adam(params, **kwargs):
        return fxkit.optim.Adam(params, decoupled_weight_decay=True, **kwargs)

    fx, th = run_both(adam, torch.optim.AdamW, init, grads, lr=0.01, weight_decay=0.3)
    assert_params_close(fx, th)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_param_groups_match_torch(name, rng):
    init, grads = problem(rng)
    groups = [{"lr": 0.03, "amsgrad": True}, {"betas": (0.5, 0.6), "weight_decay": 0.05}]
    fx, th = run_both(getattr(fxkit.optim, name), getattr(torch.optim, name), init, grads, groups=groups,
                      lr=0.01)
    assert_params_close(fx, th)



def test_adam_on_parameters_larger_than_one_chunk_matches_torch(rng):
    """Updates run slice by slice (fxkit.optim.optimizer.chunks) on large parameters: same result."""
    from fxkit.optim.optimizer import CHUNK

    init, grads = problem(rng, shapes=[(3, CHUNK // 2 + 5), (7,)], steps=3)
    fx, th = run_both(fxkit.optim.Adam, torch.optim.Adam, init, grads, lr=0.01, weight_decay=0.1, amsgrad=True,
                      maximize=True)
    assert_params_close(fx, th)
    fx, th = run_both(fxkit.optim.AdamW, torch.optim.AdamW, init, grads, lr=0.01)
    assert_params_close(fx, th)
