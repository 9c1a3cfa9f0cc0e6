"""The Optimizer base: parameter groups, zero_grad, in-place updates, state_dict, errors."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import DTypeError, StateDictError
from fxkit.optim import SGD, Adam, AdamW


def _params(rng, shapes=((3, 2), (4,))):
    return [nn.Parameter(fxkit.from_numpy(rng.standard_normal(s).astype(np.float32))) for s in shapes]


def _grads(rng, params):
    for p in params:
        p.grad = fxkit.from_numpy(rng.standard_normal(p.shape).astype(np.float32))


@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: Adam(p), lambda p: AdamW(p)],
                         ids=["SGD", "Adam", "AdamW"])
def test_step_updates_parameters_in_place(make, rng):
    model = nn.Linear(4, 3)
    before = {name: (p, p._data, p.numpy().copy()) for name, p in model.named_parameters()}
    opt = make(model.parameters())
    _grads(rng, list(model.parameters()))
    opt.step()
    for name, p in model.named_parameters():
        param, array, old = before[name]
        assert p is param and p._data is array  # the model's own storage was written
        assert not np.array_equal(p.numpy(), old)


def test_parameters_without_grad_are_skipped(rng):
    a, b = _params(rng)
    old = b.numpy().copy()
    opt = Adam([a, b], lr=0.1)
    a.grad = fxkit.from_numpy(rng.standard_normal(a.shape).astype(np.float32))
    opt.step()
    np.testing.assert_array_equal(b.numpy(), old)
    assert b not in opt.state and opt.state[a]["step"] == 1


def test_zero_grad_sets_to_none_by_default(rng):
    params = _params(rng)
    _grads(rng, params)
    SGD(params, lr=0.1).zero_grad()
    assert all(p.grad is None for p in params)


def test_zero_grad_can_fill_with_zeros(rng):
    params = _params(rng)
    _grads(rng, params)
    grads = [p.grad for p in params]
    SGD(params, lr=0.1).zero_grad(set_to_none=False)
    for p, g in zip(params, grads):
        assert p.grad is g
        np.testing.assert_array_equal(g.numpy(), np.zeros(p.shape, np.float32))


def test_step_returns_closure_value(rng):
    params = _params(rng)
    _grads(rng, params)
    assert SGD(params, lr=0.1).step(lambda: 1.5) == 1.5


def test_groups_take_defaults_and_named_parameters():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    opt = SGD([{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.5}], lr=0.1,
              momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert all(g["momentum"] == 0.9 for g in opt.param_groups)
    named = SGD(model.named_parameters(), lr=0.1)
    assert named.param_groups[0]["param_names"] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert named.param_groups[0]["params"] == list(model.parameters())
    opt.add_param_group({"params": [nn.Parameter(fxkit.ones(2))], "lr": 0.01})
    assert len(opt.param_groups) == 3 and opt.param_groups[2]["momentum"] == 0.9
    assert "Parameter Group 1" in repr(opt) and "lr: 0.5" in repr(opt)


# -- state_dict ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                                  lambda p: Adam(p, lr=0.01, amsgrad=True), lambda p: AdamW(p, lr=0.01)],
                         ids=["SGD", "Adam", "AdamW"])
def test_state_dict_round_trip_continues_identically(make, rng):
    params = _params(rng)
    grads = [[rng.standard_normal(p.shape).astype(np.float32) for p in params] for _ in range(6)]
    opt = make(params)

    def step(opt, params, gs):
        for p, g in zip(params, gs):
            p.grad = fxkit.from_numpy(g.copy())
        opt.step()

    for gs in grads[:3]:
        step(opt, params, gs)
    copies = [nn.Parameter(fxkit.from_numpy(p.numpy().copy())) for p in params]
    restored = make(copies)
    restored.load_state_dict(opt.state_dict())
    for gs in grads[3:]:
        step(opt, params, gs)
        step(restored, copies, gs)
    for p, q in zip(params, copies):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_state_dict_layout_and_load_copies(rng):
    params = _params(rng)
    _grads(rng, params)
    opt = SGD(params, lr=0.1, momentum=0.9)
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1]
    assert set(sd["state"]) == {0, 1} and set(sd["state"][0]) == {"momentum_buffer"}
    other = SGD(params, lr=0.5, momentum=0.1)
    other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] == 0.1 and other.param_groups[0]["params"][0] is params[0]
    loaded = other.state[params[0]]["momentum_buffer"]
    assert loaded._data is not opt.state[params[0]]["momentum_buffer"]._data
    np.testing.assert_array_equal(loaded.numpy(), opt.state[params[0]]["momentum_buffer"].numpy())


def test_state_names_and_layout_match_torch(rng):
    torch = pytest.importorskip("torch")
    init = [rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (4,))]
    for fx_cls, th_cls, kw in ((SGD, torch.optim.SGD, {"momentum": 0.9}),
                               (Adam, torch.optim.Adam, {"amsgrad": True}), (AdamW, torch.optim.AdamW, {})):
        fx = [nn.Parameter(fxkit.from_numpy(a.copy())) for a in init]
        th = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]
        fx_opt, th_opt = fx_cls(fx, lr=0.1, **kw), th_cls(th, lr=0.1, **kw)
        for p, q, a in zip(fx, th, init):
            p.grad = fxkit.from_numpy(a + 1)
            q.grad = torch.from_numpy(a + 1)
        fx_opt.step()
        th_opt.step()
        fx_sd, th_sd = fx_opt.state_dict(), th_opt.state_dict()
        assert {k: set(v) for k, v in fx_sd["state"].items()} == {k: set(v) for k, v in th_sd["state"].items()}
        fx_keys = set(fx_sd["param_groups"][0])
        assert fx_keys <= set(th_sd["param_groups"][0]), fx_keys - set(th_sd["param_groups"][0])


def test_load_state_dict_mismatches_are_clear(rng):
    a, b = _params(rng)
    _grads(rng, [a, b])
    opt = SGD([a, b], lr=0.1, momentum=0.9)
    opt.step()
    sd = opt.state_dict()
    with pytest.raises(StateDictError, match="parameter group 0 has 2 parameters, the optimizer's has 1"):
        SGD([a], lr=0.1).load_state_dict(sd)
    with pytest.raises(StateDictError, match="has 1 parameter groups, the optimizer has 2"):
        SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    wrong = [nn.Parameter(fxkit.ones(4)), nn.Parameter(fxkit.ones(3, 2))]
    with pytest.raises(StateDictError, match=r"'momentum_buffer' has shape \(3, 2\), its parameter has shape \(4,\)"):
        SGD(wrong, lr=0.1).load_state_dict(sd)


# -- errors ----------------------------------------------------------------------------------
def test_negative_lr_is_refused():
    with pytest.raises(ValueError, match="Invalid learning rate: lr=-0.1; it must be >= 0"):
        SGD([nn.Parameter(fxkit.ones(2))], lr=-0.1)
    with pytest.raises(ValueError, match="Invalid learning rate: lr=-1"):
        Adam([{"params": [nn.Parameter(fxkit.ones(2))], "lr": -1}])
    with pytest.raises(TypeError, match="lr must be a number, got str"):
        AdamW([nn.Parameter(fxkit.ones(2))], lr="0.1")


@pytest.mark.parametrize("betas, index", [((1.0, 0.999), 0), ((0.9, -0.1), 1), ((0.9, 1.5), 1)])
def test_betas_outside_unit_interval_are_refused(betas, index):
    with pytest.raises(ValueError, match=rf"Invalid beta parameter at index {index}: .*each beta must be in \[0, 1\)"):
        Adam([nn.Parameter(fxkit.ones(2))], betas=betas)
    with pytest.raises(ValueError, match="betas must be a pair"):
        AdamW([nn.Parameter(fxkit.ones(2))], betas=(0.9,))


def test_other_hyperparameters_are_checked():
    p = [nn.Parameter(fxkit.ones(2))]
    with pytest.raises(ValueError, match="Invalid momentum value: momentum=-0.5"):
        SGD(p, lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Invalid weight_decay value"):
        SGD(p, lr=0.1, weight_decay=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening, got "
                                         "momentum=0, dampening=0"):
        SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid epsilon value: eps=-1e-08"):
        Adam(p, eps=-1e-8)


def test_params_that_are_not_tensors_are_refused():
    with pytest.raises(TypeError, match=r"optimizer can only optimize Tensors, but params\[1\] of the group is a "
                                        r"ndarray"):
        SGD([nn.Parameter(fxkit.ones(2)), np.ones(2)], lr=0.1)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts, but got a single Parameter"):
        SGD(nn.Parameter(fxkit.ones(2)), lr=0.1)
    with pytest.raises(TypeError, match="ordering of tensors in sets changes between runs"):
        SGD({nn.Parameter(fxkit.ones(2))}, lr=0.1)
    with pytest.raises(DTypeError, match=r"floating point tensors, but params\[0\] is int64 of shape \(2,\)"):
        SGD([fxkit.tensor([1, 2])], lr=0.1)


def test_empty_and_duplicated_parameters_are_refused():
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        SGD([], lr=0.1)
    p = nn.Parameter(fxkit.ones(2))
    with pytest.raises(ValueError, match=r"some parameters appear in more than one parameter group \(group 0 and "
                                         r"the new group 1\)"):
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)


def test_loads_a_torch_state_dict_converted_to_numpy(rng):
    torch = pytest.importorskip("torch")
    init = [rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (4,))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init] for _ in range(5)]
    th = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]
    th_opt = torch.optim.Adam(th, lr=0.01, amsgrad=True)
    for gs in grads[:3]:
        for q, g in zip(th, gs):
            q.grad = torch.from_numpy(g.copy())
        th_opt.step()
    sd = th_opt.state_dict()
    converted = {"state": {k: {n: v.numpy() for n, v in s.items()} for k, s in sd["state"].items()},
                 "param_groups": sd["param_groups"]}
    fx = [nn.Parameter(fxkit.from_numpy(q.detach().numpy().copy())) for q in th]
    fx_opt = Adam(fx)
    fx_opt.load_state_dict(converted)
    assert fx_opt.state[fx[0]]["step"] == 3.0 and fx_opt.param_groups[0]["lr"] == 0.01
    for gs in grads[3:]:
        for p, q, g in zip(fx, th, gs):
            p.grad = fxkit.from_numpy(g.copy())
            q.grad = torch.from_numpy(g.copy())
        fx_opt.step()
        th_opt.step()
    for p, q in zip(fx, th):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_state_dict_leaves_out_parameters_without_state(rng):
    params = _params(rng)
    _grads(rng, params)
    opt = SGD(params, lr=0.1)  # no momentum: no buffers
    opt.step()
    assert opt.state_dict()["state"] == {}
