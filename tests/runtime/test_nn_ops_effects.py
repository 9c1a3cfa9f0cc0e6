"""The nn ops' effects that the case harness cannot compare: batch_norm's and instance_norm's in-place
running-statistics update (against PyTorch), dropout's randomness (statistics,
exact scaling, whole-channel zeroing, seeding), and embedding's in-place max_norm."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from tests.runtime.opcheck import randf, randpos


def _tensor(array, device):
    t = fxkit.from_numpy(array)
    return t if device == "cpu" else t.to(device)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 7), (2, 3, 5, 4)], ids=["NC", "NCL", "NCHW"])
@pytest.mark.parametrize("momentum", [0.1, 0.7])
def test_batch_norm_training_updates_running_stats_like_torch(shape, momentum, device, rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    c = shape[1]
    x, mean, var, w, b = randf(rng, *shape), randf(rng, c), randpos(rng, c), randf(rng, c), randf(rng, c)
    fx_mean, fx_var = _tensor(mean.copy(), device), _tensor(var.copy(), device)
    out = ops.batch_norm(_tensor(x, device), fx_mean, fx_var, _tensor(w, device), _tensor(b, device),
                         training=True, momentum=momentum)
    t_mean, t_var = torch.from_numpy(mean.copy()), torch.from_numpy(var.copy())
    expected = F.batch_norm(torch.from_numpy(x), t_mean, t_var, torch.from_numpy(w), torch.from_numpy(b),
                            training=True, momentum=momentum)
    np.testing.assert_allclose(out.cpu().numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fx_mean.cpu().numpy(), t_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fx_var.cpu().numpy(), t_var.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(fx_var.cpu().numpy(), var), "running_var was not updated"


@pytest.mark.parametrize("shape", [(4, 3, 7), (2, 3, 5, 4)], ids=["NCL", "NCHW"])
def test_instance_norm_updates_running_stats_like_torch(shape, device, rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    c = shape[1]
    x, mean, var, w, b = randf(rng, *shape), randf(rng, c), randpos(rng, c), randf(rng, c), randf(rng, c)
    fx_mean, fx_var = _tensor(mean.copy(), device), _tensor(var.copy(), device)
    out = ops.instance_norm(_tensor(x, device), fx_mean, fx_var, _tensor(w, device), _tensor(b, device),
                            momentum=0.3)
    t_mean, t_var = torch.from_numpy(mean.copy()), torch.from_numpy(var.copy())
    expected = F.instance_norm(torch.from_numpy(x), t_mean, t_var, torch.from_numpy(w), torch.from_numpy(b),
                               momentum=0.3)
    np.testing.assert_allclose(out.cpu().numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fx_mean.cpu().numpy(), t_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fx_var.cpu().numpy(), t_var.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(fx_var.cpu().numpy(), var), "running_var was not updated"
    assert ops.instance_norm.pure is False


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_batch_norm_training_of_a_strided_input_matches_torch(layout, rng):
    # the numba backend's conv results are NCHW views of channels-last buffers; other views take numpy's path
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    base = randf(rng, 4, 5, 6, 3)  # (N, H, W, C)
    x = base.transpose(0, 3, 1, 2) if layout == "channels_last" else base.transpose(0, 3, 2, 1)
    c = x.shape[1]
    mean, var = np.zeros(c, np.float32), np.ones(c, np.float32)
    out = ops.batch_norm(fxkit.from_numpy(x), fxkit.from_numpy(mean), fxkit.from_numpy(var), training=True)
    t_mean, t_var = torch.zeros(c), torch.ones(c)
    expected = F.batch_norm(torch.from_numpy(np.ascontiguousarray(x)), t_mean, t_var, training=True)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean, t_mean.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(var, t_var.numpy(), rtol=1e-4, atol=1e-6)


def test_batch_norm_eval_leaves_running_stats_alone(device, rng):
    mean, var = randf(rng, 3), randpos(rng, 3)
    fx_mean, fx_var = _tensor(mean.copy(), device), _tensor(var.copy(), device)
    ops.batch_norm(_tensor(randf(rng, 4, 3, 2, 2), device), fx_mean, fx_var)
    np.testing.assert_array_equal(fx_mean.cpu().numpy(), mean)
    np.testing.assert_array_equal(fx_var.cpu().numpy(), var)


def test_batch_norm_is_impure_so_graph_passes_keep_it():
    assert ops.batch_norm.pure is False
    assert ops.dropout.pure is False and ops.dropout2d.pure is False


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_dropout_zeroes_a_fraction_p_and_scales_survivors_exactly(p, device, rng):
    x = randpos(rng, 400, 500)  # positive: a zero in the output can only come from dropout
    out = ops.dropout(_tensor(x, device), p).cpu().numpy()
    dropped = out == 0
    assert abs(dropped.mean() - p) < 0.01, f"zeroed fraction {dropped.mean():.4f} for p={p}"
    kept = ~dropped
    np.testing.assert_array_equal(out[kept], x[kept] * np.float32(1 / (1 - p)))
    assert out.dtype == np.float32


def test_dropout_inplace_writes_into_input(device, rng):
    x = _tensor(randpos(rng, 50, 40), device)
    before = x.cpu().numpy().copy()
    out = ops.dropout(x, 0.5, inplace=True)
    got = x.cpu().numpy()
    np.testing.assert_array_equal(out.cpu().numpy(), got)
    assert (got == 0).any() and not np.array_equal(got, before)
    np.testing.assert_array_equal(got[got != 0], before[got != 0] * np.float32(2.0))


def test_dropout_eval_returns_the_input_data(rng):
    x = fxkit.from_numpy(randf(rng, 3, 4))
    for fn in (ops.dropout, ops.dropout2d):
        assert np.shares_memory(fn(x, 0.5, training=False).numpy(), x.numpy())
        assert np.shares_memory(fn(x, 0.0).numpy(), x.numpy())


def test_dropout_is_reproducible_under_manual_seed(device, rng):
    x = _tensor(randf(rng, 64, 64), device)
    fxkit.manual_seed(123)
    first = ops.dropout(x, 0.5).cpu().numpy()
    second = ops.dropout(x, 0.5).cpu().numpy()
    fxkit.manual_seed(123)
    np.testing.assert_array_equal(ops.dropout(x, 0.5).cpu().numpy(), first)
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("shape", [(40, 50, 3, 4), (40, 50, 6)], ids=["NCHW", "NCL"])
def test_dropout2d_zeroes_whole_channels(shape, device, rng):
    p = 0.3
    x = randpos(rng, *shape)
    out = ops.dropout2d(_tensor(x, device), p).cpu().numpy()
    planes, x_planes = out.reshape(shape[0] * shape[1], -1), x.reshape(shape[0] * shape[1], -1)
    dropped = (planes == 0).all(axis=1)
    assert abs(dropped.mean() - p) < 0.04, f"zeroed channel fraction {dropped.mean():.3f} for p={p}"
    np.testing.assert_array_equal(planes[~dropped], x_planes[~dropped] * np.float32(1 / (1 - p)))


def test_embedding_max_norm_renormalises_weight_in_place_like_torch(device, rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    idx, weight = rng.integers(0, 8, size=(3, 4)), randf(rng, 10, 5) * 3
    fx_weight = _tensor(weight.copy(), device)
    out = ops.embedding(_tensor(idx, device), fx_weight, max_norm=1.0)
    t_weight = torch.from_numpy(weight.copy())
    expected = F.embedding(torch.from_numpy(idx), t_weight, max_norm=1.0)
    np.testing.assert_allclose(out.cpu().numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fx_weight.cpu().numpy(), t_weight.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fx_weight.cpu().numpy()[8:], weight[8:])  # unreferenced rows untouched
