"""Run an fxkit optimizer and its torch.optim twin from the same parameters over the
same random gradients (import after ``pytest.importorskip("torch")``)."""
import numpy as np
import torch

import fxkit
from fxkit import nn

SHAPES = [(4, 3), (5,), (2, 3, 2)]
STEPS = 6


def problem(rng, shapes=SHAPES, steps=STEPS):
    """Initial parameter values and one gradient per parameter per step (float32, never zeros)."""
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return init, grads


def fx_params(init, device="cpu"):
    return [nn.Parameter(fxkit.from_numpy(a.copy()).to(device)) for a in init]


def th_params(init):
    return [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]


def set_grads(fx, th, grads, device="cpu"):
    for p, g in zip(fx, grads):
        p.grad = fxkit.from_numpy(g.copy()).to(device)
    for p, g in zip(th, grads):
        p.grad = torch.from_numpy(g.copy())


def assert_params_close(fx, th, tol=1e-6):
    """Each parameter within ``tol`` relative error (2-norm) of PyTorch's."""
    for i, (f, t) in enumerate(zip(fx, th)):
        got = np.asarray(f.cpu().numpy(), dtype=np.float64)
        want = t.detach().numpy().astype(np.float64)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < tol, f"parameter {i}: relative error {err:.3g} >= {tol}"


def run_both(fx_cls, th_cls, init, grads, device="cpu", groups=None, **kwargs):
    """Step both optimizers once per gradient set; returns the fxkit and torch parameters.

    ``groups``, when given, is a list of per-group option dicts; parameter i goes to
    group ``i % len(groups)``.
    """
    fx, th = fx_params(init, device), th_params(init)
    if groups is None:
        fx_opt, th_opt = fx_cls(fx, **kwargs), th_cls(th, **kwargs)
    else:
        def split(params):
            return [dict(opts, params=params[i::len(groups)]) for i, opts in enumerate(groups)]
        fx_opt, th_opt = fx_cls(split(fx), **kwargs), th_cls(split(th), **kwargs)
    for step_grads in grads:
        set_grads(fx, th, step_grads, device)
        fx_opt.step()
        th_opt.step()
    return fx, th
