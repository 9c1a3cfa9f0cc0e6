"""Batch norm's per-channel passes as numba loops (`fxkit.runtime.ops.channel_loops`): evaluation batch_norm
gives numpy's form bit for bit; training batch_norm and batch_norm_training_backward, whose statistics and sums
the loops accumulate in float64, are as close to a float64 reference as numpy's float32 form and match PyTorch."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fxkit
import fxkit.nn.functional as F
from fxkit.runtime.ops import channel_loops, loop_gate


def _run(loop, fn):
    """``fn()`` with the loops on every size (``loop``) or off, and how many loop calls it made."""
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop_gate, "LOOP_MIN", 1 if loop else 2**62)
        for name in ("channel_affine", "planes_moments", "batch_norm_gradient_into"):
            original = getattr(channel_loops, name)
            patch.setattr(channel_loops, name, lambda *a, original=original: calls.append(1) or original(*a))
        return fn(), len(calls)


def _float64_batch_norm(x, g, w, b, mean, var, training, eps=1e-5):
    """Batch norm's output and input gradient in float64: the batch's statistics in training, else ``mean``
    and ``var``."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axes), x.var(axes)
    invstd = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
    xhat = (x - np.reshape(mean, shape)) * invstd.reshape(shape)
    y = xhat * w.reshape(shape) + b.reshape(shape)
    if not training:
        return y, g * (w * invstd).reshape(shape)
    mean_g = g.mean(axes).reshape(shape)
    mean_gx = (g * xhat).mean(axes).reshape(shape)
    return y, (w * invstd).reshape(shape) * (g - mean_g - xhat * mean_gx)


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(2, 5), st.integers(1, 9), st.integers(1, 7), st.integers(1, 7)),
       dtype=st.sampled_from([np.float32, np.float64]), training=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_batch_norm_loops_match_numpys_form(shape, dtype, training, seed):
    """Evaluation: numpy's bits. Training: within the error numpy's form makes of the float64 values (its
    float32 sums), plus a float32 rounding or two of the output."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3)).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w, b = rng.standard_normal(shape[1]).astype(dtype), rng.standard_normal(shape[1]).astype(dtype)
    mean, var = rng.standard_normal(shape[1]).astype(dtype), rng.random(shape[1]).astype(dtype) + 0.5

    def forward_and_backward():
        xt = fxkit.from_numpy(x).requires_grad_()
        y = F.batch_norm(xt, fxkit.from_numpy(mean.copy()), fxkit.from_numpy(var.copy()), fxkit.from_numpy(w),
                         fxkit.from_numpy(b), training=training)
        y.backward(fxkit.from_numpy(g))
        return y.numpy(), xt.grad.numpy()

    expected, none = _run(False, forward_and_backward)
    got, calls = _run(True, forward_and_backward)
    assert none == 0 and calls == (3 if training else 1)  # the eval gradient is a plain product, no loop
    if not training:
        for e, o in zip(expected, got):
            np.testing.assert_array_equal(o.view(np.uint8), e.view(np.uint8))
        return
    eps = np.finfo(dtype).eps
    for e, o, r in zip(expected, got, _float64_batch_norm(x, g, w, b, mean, var, training)):
        numpy_error = np.abs(e - r).max()
        assert np.abs(o - r).max() <= 2 * numpy_error + 8 * eps * np.abs(r).max()


def test_per_sample_affines_keep_numpys_form():
    # instance norm scales per sample and channel: with as many samples as channels the shapes could be mistaken
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((4, 4, 5, 5)).astype(np.float32))
    _, calls = _run(True, lambda: F.instance_norm(x))
    assert calls == 0


@pytest.mark.parametrize("plane", [(8, 8), (2, 2)])  # planes of 64 values by channel; of 4 along whole rows
def test_batch_norm_through_the_loops_matches_pytorch(plane):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((2, 2 if plane == (8, 8) else 32, 4) + plane).astype(np.float32)
    w, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    xt = fxkit.from_numpy(x).requires_grad_()
    wt, bt = fxkit.from_numpy(w).requires_grad_(), fxkit.from_numpy(b).requires_grad_()
    (y, _), calls = _run(True, lambda: (y := F.batch_norm(xt, None, None, wt, bt, training=True),
                                        y.backward(fxkit.from_numpy(g))))
    tx, tw, tb = (torch.from_numpy(v).requires_grad_() for v in (x, w, b))
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True)
    ty.backward(torch.from_numpy(g))
    assert calls == 3
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    for ours, theirs in ((xt, tx), (wt, tw), (bt, tb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)
