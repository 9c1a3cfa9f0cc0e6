"""Every fxkit.nn layer against its torch.nn twin: same state_dict keys and shapes,
and the same outputs once PyTorch's weights are loaded (train and eval where they differ)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from tests.nn.torch_compare import assert_close, copy_state, fx, rand, randomize_batchnorm, th  # noqa: E402


def check_layer(fx_layer, torch_layer, *inputs, tol=1e-5):
    """Same state_dict layout; with torch's weights, the same output."""
    torch_sd = torch_layer.state_dict()
    fx_sd = fx_layer.state_dict()
    assert list(fx_sd) == list(torch_sd)
    assert [tuple(v.shape) for v in fx_sd.values()] == [tuple(v.shape) for v in torch_sd.values()]
    assert [n for n, _ in fx_layer.named_parameters()] == [n for n, _ in torch_layer.named_parameters()]
    copy_state(fx_layer, torch_layer)
    out = fx_layer(*(fx(a) for a in inputs))
    with torch.no_grad():
        ref = torch_layer(*(th(a) for a in inputs))
    assert_close(out, ref, tol)
    return out, ref


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7), (7,)], ids=["2d", "3d", "1d"])
def test_linear(rng, bias, shape):
    check_layer(nn.Linear(7, 4, bias=bias), torch.nn.Linear(7, 4, bias=bias), rand(rng, *shape))


def test_identity(rng):
    x = fx(rand(rng, 3, 4))
    assert nn.Identity(54, unused="x")(x) is x


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 5), stride=(2, 1), padding=(1, 2)),
    dict(kernel_size=3, padding="same"),
    dict(kernel_size=4, padding="same", dilation=2),
    dict(kernel_size=3, padding="valid"),
    dict(kernel_size=3, dilation=2, padding=2),
    dict(kernel_size=3, groups=2, padding=1),
    dict(kernel_size=1, bias=False),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_conv2d(rng, kwargs):
    check_layer(nn.Conv2d(4, 6, **kwargs), torch.nn.Conv2d(4, 6, **kwargs), rand(rng, 2, 4, 11, 9))


def test_conv2d_depthwise(rng):
    check_layer(nn.Conv2d(6, 6, 3, groups=6, padding=1), torch.nn.Conv2d(6, 6, 3, groups=6, padding=1),
                rand(rng, 1, 6, 8, 8))


@pytest.mark.parametrize("cls, shape", [("BatchNorm2d", (4, 3, 5, 6)), ("BatchNorm1d", (8, 3)),
                                        ("BatchNorm1d", (4, 3, 7))])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_train_then_eval(rng, cls, shape, momentum):
    fx_bn = getattr(nn, cls)(3, momentum=momentum)
    ref_bn = getattr(torch.nn, cls)(3, momentum=momentum)
    randomize_batchnorm(ref_bn)
    copy_state(fx_bn, ref_bn)
    for _ in range(3):  # training: batch statistics, running stats updated in place
        x = rand(rng, *shape) * 3 + 1
        out = fx_bn(fx(x))
        ref = ref_bn(th(x))
        assert_close(out, ref)
    for name, buf in ref_bn.named_buffers():
        assert np.allclose(fx_bn.get_buffer(name).numpy(), buf.numpy(), rtol=1e-5, atol=1e-6), name
    assert fx_bn.num_batches_tracked.item() == 3
    fx_bn.eval()
    ref_bn.eval()
    x = rand(rng, *shape)
    with torch.no_grad():
        assert_close(fx_bn(fx(x)), ref_bn(th(x)))
    assert fx_bn.num_batches_tracked.item() == 3  # eval leaves the statistics alone


@pytest.mark.parametrize("kwargs", [dict(affine=False), dict(track_running_stats=False), dict(bias=False),
                                    dict(eps=1e-3, momentum=0.3)],
                         ids=["no-affine", "no-stats", "no-bias", "eps-momentum"])
@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_options(rng, kwargs, training):
    fx_bn, ref_bn = nn.BatchNorm2d(5, **kwargs), torch.nn.BatchNorm2d(5, **kwargs)
    randomize_batchnorm(ref_bn)
    fx_bn.train(training)
    ref_bn.train(training)
    check_layer(fx_bn, ref_bn, rand(rng, 3, 5, 4, 4))


@pytest.mark.parametrize("normalized_shape", [8, (4, 8)])
@pytest.mark.parametrize("kwargs", [{}, dict(elementwise_affine=False), dict(bias=False), dict(eps=1e-3)])
def test_layernorm(rng, normalized_shape, kwargs):
    fx_ln, ref_ln = nn.LayerNorm(normalized_shape, **kwargs), torch.nn.LayerNorm(normalized_shape, **kwargs)
    with torch.no_grad():
        for p in ref_ln.parameters():
            p.copy_(torch.rand(p.shape) + 0.5)
    check_layer(fx_ln, ref_ln, rand(rng, 2, 3, 4, 8) * 2 + 1)


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(rng, padding_idx):
    fx_emb = nn.Embedding(10, 4, padding_idx=padding_idx)
    ref_emb = torch.nn.Embedding(10, 4, padding_idx=padding_idx)
    if padding_idx is not None:
        assert not fx_emb.weight.numpy()[padding_idx].any()  # the padding row starts at zero
    assert fx_emb.padding_idx == ref_emb.padding_idx
    ids = rng.integers(0, 10, size=(3, 5))
    copy_state(fx_emb, ref_emb)
    assert_close(fx_emb(fxkit.from_numpy(ids)), ref_emb(torch.from_numpy(ids)))


@pytest.mark.parametrize("name, kwargs", [
    ("ReLU", {}), ("GELU", {}), ("GELU", dict(approximate="tanh")), ("SiLU", {}), ("Sigmoid", {}), ("Tanh", {}),
    ("Softmax", dict(dim=1)), ("Softmax", dict(dim=-1)), ("LogSoftmax", dict(dim=1)), ("LogSoftmax", dict(dim=0)),
])
def test_activation(rng, name, kwargs):
    check_layer(getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs), rand(rng, 4, 5, 6))


@pytest.mark.parametrize("name", ["ReLU", "SiLU"])
def test_inplace_activation_writes_into_input(rng, name):
    x = rand(rng, 3, 4)
    t = fx(x.copy())
    out = getattr(nn, name)(inplace=True)(t)
    ref = getattr(torch.nn, name)()(th(x))
    assert_close(out, ref)
    assert_close(t, ref)


@pytest.mark.parametrize("name, shape", [("Softmax", (3, 4)), ("LogSoftmax", (2, 3, 4))])
def test_softmax_implicit_dim_warns_like_torch(rng, name, shape):
    x = rand(rng, *shape)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = getattr(nn, name)()(fx(x))
    with pytest.warns(UserWarning):
        ref = getattr(torch.nn, name)()(th(x))
    assert_close(out, ref)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=3, stride=2, ceil_mode=True),
                                    dict(kernel_size=2, dilation=2), dict(kernel_size=(2, 3), stride=(1, 2))])
def test_maxpool2d(rng, kwargs):
    check_layer(nn.MaxPool2d(**kwargs), torch.nn.MaxPool2d(**kwargs), rand(rng, 2, 3, 9, 10))


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=3, padding=1, count_include_pad=False),
                                    dict(kernel_size=3, stride=2, ceil_mode=True)])
def test_avgpool2d(rng, kwargs):
    check_layer(nn.AvgPool2d(**kwargs), torch.nn.AvgPool2d(**kwargs), rand(rng, 2, 3, 9, 10))


@pytest.mark.parametrize("output_size", [(1, 1), 3, (2, 5), (None, 4)])
def test_adaptive_avgpool2d(rng, output_size):
    check_layer(nn.AdaptiveAvgPool2d(output_size), torch.nn.AdaptiveAvgPool2d(output_size),
                rand(rng, 2, 3, 9, 10))


@pytest.mark.parametrize("kwargs", [{}, dict(start_dim=0), dict(start_dim=1, end_dim=2)])
def test_flatten(rng, kwargs):
    check_layer(nn.Flatten(**kwargs), torch.nn.Flatten(**kwargs), rand(rng, 2, 3, 4, 5))


@pytest.mark.parametrize("name", ["Dropout", "Dropout2d"])
def test_dropout_is_identity_in_eval(rng, name):
    x = rand(rng, 2, 3, 4, 4)
    out = getattr(nn, name)(p=0.7).eval()(fx(x))
    np.testing.assert_array_equal(out.numpy(), x)


def test_dropout_train_zeroes_and_rescales(rng):
    x = rng.random((200, 200)).astype(np.float32) + 0.5
    out = nn.Dropout(p=0.25)(fx(x)).numpy()
    kept = out != 0
    assert 0.70 < kept.mean() < 0.80
    np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-6)


def test_dropout2d_train_zeroes_whole_channels(rng):
    x = rng.random((16, 32, 3, 3)).astype(np.float32) + 0.5
    out = nn.Dropout2d(p=0.5)(fx(x)).numpy()
    per_channel = (out != 0).reshape(16, 32, 9)
    assert (per_channel.all(-1) | ~per_channel.any(-1)).all()  # each channel kept or dropped as a whole
    assert 0.3 < per_channel.all(-1).mean() < 0.7
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] * 2, rtol=1e-6)


def test_sequential_matches_torch(rng):
    fx_seq = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    ref_seq = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                  torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5))
    randomize_batchnorm(ref_seq)
    fx_seq.eval()
    ref_seq.eval()
    check_layer(fx_seq, ref_seq, rand(rng, 2, 3, 6, 6))
    assert repr(fx_seq) == repr(ref_seq)


# -- MultiheadAttention -----------------------------------------------------------------

def _mha_pair(**kwargs):
    fx_mha, ref_mha = nn.MultiheadAttention(**kwargs), torch.nn.MultiheadAttention(**kwargs)
    with torch.no_grad():  # torch zero-initialises the biases: make them count
        for name, p in ref_mha.named_parameters():
            if "bias" in name:
                p.copy_(torch.rand(p.shape) - 0.5)
    copy_state(fx_mha, ref_mha)
    return fx_mha.eval(), ref_mha.eval()


def _run_mha(fx_mha, ref_mha, q, k, v, **kwargs):
    masks = {name: kwargs.pop(name) for name in ("attn_mask", "key_padding_mask") if name in kwargs}
    fx_out = fx_mha(fx(q), fx(k), fx(v), **{n: fxkit.from_numpy(m) for n, m in masks.items()}, **kwargs)
    with torch.no_grad():
        ref_out = ref_mha(th(q), th(k), th(v), **{n: torch.from_numpy(m) for n, m in masks.items()}, **kwargs)
    return fx_out, ref_out


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("average", [True, False])
def test_mha_cross_attention(rng, batch_first, average):
    fx_mha, ref_mha = _mha_pair(embed_dim=16, num_heads=4, batch_first=batch_first)
    n, tgt, src = 3, 5, 7
    q_shape, kv_shape = ((n, tgt, 16), (n, src, 16)) if batch_first else ((tgt, n, 16), (src, n, 16))
    (out, w), (ref, ref_w) = _run_mha(fx_mha, ref_mha, rand(rng, *q_shape), rand(rng, *kv_shape),
                                      rand(rng, *kv_shape), average_attn_weights=average)
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_mha_self_attention_uses_packed_projection(rng):
    fx_mha, ref_mha = _mha_pair(embed_dim=12, num_heads=3, batch_first=True)
    x = rand(rng, 2, 6, 12)
    out, w = fx_mha(fx(x), fx(x), fx(x))
    with torch.no_grad():
        t = th(x)
        ref, ref_w = ref_mha(t, t, t)
    assert_close(out, ref)
    assert_close(w, ref_w)


@pytest.mark.parametrize("mask_kind", ["bool", "float", "3d"])
def test_mha_attn_mask_and_key_padding(rng, mask_kind):
    fx_mha, ref_mha = _mha_pair(embed_dim=8, num_heads=2)
    tgt, src, n = 4, 6, 3
    if mask_kind == "bool":
        attn_mask = np.triu(np.ones((tgt, src), dtype=bool), k=3)
    elif mask_kind == "float":
        attn_mask = rand(rng, tgt, src)
    else:
        attn_mask = rand(rng, n * 2, tgt, src)
    padding = np.zeros((n, src), dtype=bool)
    padding[:, -2:] = True
    if mask_kind != "bool":  # torch wants both masks of one kind: a float padding mask adds -inf
        padding = np.where(padding, -np.inf, 0).astype(np.float32)
    (out, w), (ref, ref_w) = _run_mha(fx_mha, ref_mha, rand(rng, tgt, n, 8), rand(rng, src, n, 8),
                                      rand(rng, src, n, 8), attn_mask=attn_mask, key_padding_mask=padding)
    assert_close(out, ref)
    assert_close(w, ref_w)
    assert not w.numpy()[..., -2:].any()  # padded keys get no weight


def test_mha_without_weights_and_unbatched(rng):
    fx_mha, ref_mha = _mha_pair(embed_dim=8, num_heads=2, batch_first=True)
    q, kv = rand(rng, 5, 8), rand(rng, 7, 8)
    (out, w), (ref, _) = _run_mha(fx_mha, ref_mha, q, kv, kv, need_weights=False)
    assert w is None
    assert_close(out, ref)
    (out, w), (ref, ref_w) = _run_mha(fx_mha, ref_mha, q, kv, kv)
    assert_close(w, ref_w)


@pytest.mark.parametrize("bias", [True, False])
def test_mha_kdim_vdim_and_bias(rng, bias):
    fx_mha, ref_mha = _mha_pair(embed_dim=8, num_heads=2, kdim=5, vdim=3, bias=bias)
    assert [n for n, _ in fx_mha.named_parameters()] == [n for n, _ in ref_mha.named_parameters()]
    (out, w), (ref, ref_w) = _run_mha(fx_mha, ref_mha, rand(rng, 4, 2, 8), rand(rng, 6, 2, 5), rand(rng, 6, 2, 3))
    assert_close(out, ref)
    assert_close(w, ref_w)


def test_mha_parameter_layout_and_init():
    fx_mha, ref_mha = nn.MultiheadAttention(16, 4), torch.nn.MultiheadAttention(16, 4)
    assert [(n, tuple(p.shape)) for n, p in fx_mha.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in ref_mha.named_parameters()]
    assert not fx_mha.in_proj_bias.numpy().any() and not fx_mha.out_proj.bias.numpy().any()
    bound = np.sqrt(6 / (16 + 48))  # xavier_uniform_ of the packed (48, 16) weight
    assert np.abs(fx_mha.in_proj_weight.numpy()).max() <= bound
    assert repr(fx_mha) == repr(ref_mha)


def test_mha_dropout_only_in_training(rng):
    mha = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = fx(rand(rng, 2, 16, 8))
    _, w_train = mha(x, x, x, average_attn_weights=False)
    mha.eval()
    _, w_eval = mha(x, x, x, average_attn_weights=False)
    np.testing.assert_allclose(w_eval.numpy().sum(-1), 1, rtol=1e-5)
    kept = w_train.numpy() != 0
    assert 0.3 < kept.mean() < 0.7
    # the kept weights are the eval weights rescaled by 1 / (1 - p)
    np.testing.assert_allclose(w_train.numpy()[kept], 2 * w_eval.numpy()[kept], rtol=1e-5)


# -- mobile activations and the newer normalisations -------------------------------------------
@pytest.mark.parametrize("name", ["ReLU6", "Hardsigmoid", "Hardswish", "Mish"])
@pytest.mark.parametrize("inplace", [False, True])
def test_mobile_activation(rng, name, inplace):
    x = rand(rng, 4, 5, 6) * 4
    fx_layer, ref_layer = getattr(nn, name)(inplace=inplace), getattr(torch.nn, name)(inplace=inplace)
    assert repr(fx_layer) == repr(ref_layer)
    t = fx(x.copy())
    out = fx_layer(t)
    ref = ref_layer(th(x.copy()))
    assert_close(out, ref)
    if inplace:
        assert_close(t, ref)


@pytest.mark.parametrize("kwargs", [{}, dict(affine=False), dict(eps=1e-3), dict(bias=False)])
@pytest.mark.parametrize("shape", [(2, 6, 4, 5), (3, 6, 7)], ids=["NCHW", "NCL"])
def test_groupnorm(rng, kwargs, shape):
    fx_gn, ref_gn = nn.GroupNorm(3, 6, **kwargs), torch.nn.GroupNorm(3, 6, **kwargs)
    with torch.no_grad():
        for p in ref_gn.parameters():
            p.copy_(torch.rand(p.shape) + 0.5)
    assert repr(fx_gn) == repr(ref_gn)
    check_layer(fx_gn, ref_gn, rand(rng, *shape) * 2 + 1)


@pytest.mark.parametrize("normalized_shape", [8, (4, 8)])
@pytest.mark.parametrize("kwargs", [{}, dict(elementwise_affine=False), dict(eps=1e-6)])
def test_rmsnorm(rng, normalized_shape, kwargs):
    fx_rms, ref_rms = nn.RMSNorm(normalized_shape, **kwargs), torch.nn.RMSNorm(normalized_shape, **kwargs)
    with torch.no_grad():
        for p in ref_rms.parameters():
            p.copy_(torch.rand(p.shape) + 0.5)
    assert repr(fx_rms) == repr(ref_rms)
    check_layer(fx_rms, ref_rms, rand(rng, 2, 3, 4, 8) * 2 + 1)


@pytest.mark.parametrize("cls, shape", [("InstanceNorm1d", (4, 3, 7)), ("InstanceNorm1d", (3, 7)),
                                        ("InstanceNorm2d", (2, 3, 5, 6)), ("InstanceNorm2d", (3, 5, 6))],
                         ids=["1d", "1d-unbatched", "2d", "2d-unbatched"])
@pytest.mark.parametrize("kwargs", [{}, dict(affine=True), dict(affine=True, track_running_stats=True, momentum=0.3),
                                    dict(track_running_stats=True, momentum=None)],
                         ids=["plain", "affine", "stats", "stats-cumulative"])
def test_instancenorm_train_then_eval(rng, cls, shape, kwargs):
    fx_in, ref_in = getattr(nn, cls)(3, **kwargs), getattr(torch.nn, cls)(3, **kwargs)
    with torch.no_grad():
        for p in ref_in.parameters():
            p.copy_(torch.rand(p.shape) + 0.5)
    assert repr(fx_in) == repr(ref_in)
    copy_state(fx_in, ref_in)
    for _ in range(2):
        x = rand(rng, *shape) * 3 + 1
        assert_close(fx_in(fx(x)), ref_in(th(x)))
    for name, buf in ref_in.named_buffers():
        assert np.allclose(fx_in.get_buffer(name).numpy(), buf.numpy(), rtol=1e-5, atol=1e-6), name
    fx_in.eval()
    ref_in.eval()
    check_layer(fx_in, ref_in, rand(rng, *shape))


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_mha_without_weights_and_masks(rng, mask_kind):
    fx_mha, ref_mha = _mha_pair(embed_dim=8, num_heads=2, batch_first=True)
    n, tgt, src = 3, 4, 6
    attn_mask = np.triu(np.ones((tgt, src), dtype=bool), k=3)
    padding = np.zeros((n, src), dtype=bool)
    padding[:, -2:] = True
    if mask_kind == "float":
        attn_mask, padding = (np.where(m, -np.inf, 0).astype(np.float32) for m in (attn_mask, padding))
    (out, w), (ref, _) = _run_mha(fx_mha, ref_mha, rand(rng, n, tgt, 8), rand(rng, n, src, 8), rand(rng, n, src, 8),
                                  attn_mask=attn_mask, key_padding_mask=padding, need_weights=False)
    assert w is None
    assert_close(out, ref)
