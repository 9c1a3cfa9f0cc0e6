"""Batch norm's per-channel affine passes as numba loops (`fxkit.runtime.ops.channel_loops`): training and
evaluation batch_norm and batch_norm_training_backward give numpy's form bit for bit, and PyTorch's values."""
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
        for name in ("channel_affine", "centered_affine_plus_scaled"):
            original = getattr(channel_loops, name)
            patch.setattr(channel_loops, name, lambda *a, original=original: calls.append(1) or original(*a))
        return fn(), len(calls)


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(2, 5), st.integers(1, 9), st.integers(1, 7), st.integers(1, 7)),
       dtype=st.sampled_from([np.float32, np.float64]), training=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_batch_norm_loops_give_numpys_bits(shape, dtype, training, seed):
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
    assert none == 0 and calls == (2 if training else 1)  # the eval gradient is a plain product, no loop
    for e, o in zip(expected, got):
        np.testing.assert_array_equal(o.view(np.uint8), e.view(np.uint8))


def test_per_sample_affines_keep_numpys_form():
    # instance norm scales per sample and channel: with as many samples as channels the shapes could be mistaken
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((4, 4, 5, 5)).astype(np.float32))
    _, calls = _run(True, lambda: F.instance_norm(x))
    assert calls == 0


def test_batch_norm_through_the_loops_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((2, 2, 4, 8, 8)).astype(np.float32)
    w, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    xt = fxkit.from_numpy(x).requires_grad_()
    wt, bt = fxkit.from_numpy(w).requires_grad_(), fxkit.from_numpy(b).requires_grad_()
    (y, _), calls = _run(True, lambda: (y := F.batch_norm(xt, None, None, wt, bt, training=True),
                                        y.backward(fxkit.from_numpy(g))))
    tx, tw, tb = (torch.from_numpy(v).requires_grad_() for v in (x, w, b))
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True)
    ty.backward(torch.from_numpy(g))
    assert calls == 2
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    for ours, theirs in ((xt, tx), (wt, tw), (bt, tb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)
