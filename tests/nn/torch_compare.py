"""Helpers for checking fxkit.nn against PyTorch (import after ``pytest.importorskip("torch")``)."""
import numpy as np
import torch

import fxkit


def copy_state(fx_module, torch_module):
    """Load a torch module's state_dict into the fxkit module, converted to numpy."""
    return fx_module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def randomize_batchnorm(torch_module, seed=0):
    """Give every torch BatchNorm non-trivial running stats and affine parameters,
    so eval mode is not the identity map."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in torch_module.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                n = m.num_features
                if m.track_running_stats:
                    m.running_mean.copy_(torch.rand(n, generator=gen) * 0.2 - 0.1)
                    m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                    if m.bias is not None:
                        m.bias.copy_(torch.rand(n, generator=gen) * 0.2 - 0.1)


def rand(rng, *shape):
    """float32 values in [-2, 2) (never zeros)."""
    return (rng.random(shape) * 4 - 2).astype(np.float32)


def fx(a):
    return fxkit.from_numpy(np.ascontiguousarray(a))


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def rel_err(out, ref):
    """‖out - ref‖ / ‖ref‖ in float64; out an fxkit Tensor, ref a torch tensor."""
    out = np.asarray(out.numpy(), dtype=np.float64)
    ref = ref.detach().numpy().astype(np.float64)
    assert out.shape == ref.shape, f"shape {out.shape} != reference {ref.shape}"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def assert_close(out, ref, tol=1e-5):
    err = rel_err(out, ref)
    assert err < tol, f"relative error {err:.3g} >= {tol}"
