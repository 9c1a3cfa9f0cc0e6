"""Autograd semantics against PyTorch's: leaves and .grad, backward's arguments, views and
broadcasting, grad mode, detach, retain_graph, hooks, autograd.grad, factories."""
import threading

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import AutogradError, DTypeError
from fxkit.nn import functional as F


def leaf(rng, *shape, dtype=np.float64):
    return fxkit.from_numpy((rng.random(shape) * 4 - 2).astype(dtype)).requires_grad_()


# -- leaves, .grad, backward -------------------------------------------------------------------
def test_leaves_accumulate_and_non_leaves_keep_no_grad(rng):
    x = leaf(rng, 3, 4)
    y = x * x
    assert x.is_leaf and not y.is_leaf and y.requires_grad and y.grad_fn.name() == "mul_backward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())
    (x * 3).sum().backward()  # a second graph adds to .grad
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)
    assert y.grad is None


def test_retain_grad_keeps_a_non_leaf_gradient(rng):
    x = leaf(rng, 5)
    y = x.exp()
    y.retain_grad()
    assert y.retains_grad
    (y * 2).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), np.full(5, 2.0))
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.numpy()))


def test_backward_of_a_non_scalar_needs_a_gradient(rng):
    x = leaf(rng, 2, 3)
    y = x * 2
    with pytest.raises(AutogradError, match=r"grad can be implicitly created only for scalar outputs; element 0 has "
                                            r"shape \[2, 3\]; pass gradient="):
        y.backward()
    g = fxkit.from_numpy(rng.random((2, 3)))
    y.backward(g)
    np.testing.assert_allclose(x.grad.numpy(), 2 * g.numpy())
    with pytest.raises(AutogradError, match=r"mismatch in shape: gradient 0 has shape \[3\]"):
        (x * 2).backward(fxkit.ones(3))


def test_backward_of_a_tensor_without_history_is_an_error():
    with pytest.raises(AutogradError, match="does not require grad and has no grad_fn; create the leaves with "
                                            "requires_grad=True"):
        fxkit.ones(3).sum().backward()


def test_broadcasting_sums_gradients_to_each_input_shape(rng):
    a, b = leaf(rng, 3, 1), leaf(rng, 1, 4)
    c = leaf(rng, 4)
    ((a + b) * c).sum().backward()
    an, bn, cn = a.numpy(), b.numpy(), c.numpy()
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), cn.sum()))
    np.testing.assert_allclose(b.grad.numpy(), cn[None, :] * 3)
    np.testing.assert_allclose(c.grad.numpy(), (an + bn).sum(0))


def test_python_scalars_and_float32_stay_float32(rng):
    x = leaf(rng, 4, dtype=np.float32)
    y = (x * 2.5 + 1).sigmoid()
    y.sum().backward()
    assert x.grad.dtype is fxkit.float32 and y.dtype is fxkit.float32


def test_gradients_through_views(rng):
    x = leaf(rng, 2, 3, 4)
    y = x.view(6, 4).t().reshape(2, 12)[1, 2:10:3].unsqueeze(0).expand(5, 3)
    y.sum().backward()
    expected = np.zeros((2, 3, 4))
    flat = expected.reshape(6, 4).T.reshape(2, 12)
    flat[1, 2:10:3] += 5
    np.testing.assert_allclose(x.grad.numpy(), flat.reshape(4, 6).T.reshape(2, 3, 4))


def test_advanced_indexing_adds_repeated_picks(rng):
    x = leaf(rng, 4, 3)
    x[fxkit.tensor([0, 2, 0])].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.array([[2.0] * 3, [0] * 3, [1] * 3, [0] * 3]))


def test_several_outputs_with_unused_ones(rng):
    x = leaf(rng, 4, 6)
    a, b, c = x.chunk(3, 1)
    (a * 2 + c).sum().backward()  # b gets no gradient: zeros there
    np.testing.assert_allclose(x.grad.numpy(), np.tile(np.array([2, 2, 0, 0, 1, 1.0]), (4, 1)))
    values, indices = x.max(1)
    x.grad = None
    values.sum().backward()
    expected = np.zeros((4, 6))
    expected[np.arange(4), indices.numpy()] = 1
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    assert not indices.requires_grad


# -- grad mode, detach ----------------------------------------------------------------------------------
def test_no_grad_records_nothing(rng):
    x = leaf(rng, 3)
    with fxkit.no_grad():
        y = x * 2
        assert not fxkit.is_grad_enabled()
        with fxkit.enable_grad():
            z = x * 2
    assert fxkit.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad

    @fxkit.no_grad()
    def infer(t):
        return t.exp()

    assert not infer(x).requires_grad

    @fxkit.no_grad
    def infer_bare(t):
        return t.exp()

    assert not infer_bare(x).requires_grad and infer_bare.__name__ == "infer_bare"
    with fxkit.set_grad_enabled(False):
        assert not (x + 1).requires_grad
    assert fxkit.is_grad_enabled()
    fxkit.set_grad_enabled(False)
    assert not fxkit.is_grad_enabled()
    fxkit.set_grad_enabled(True)


def test_detach_shares_data_outside_the_graph(rng):
    x = leaf(rng, 3)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and np.shares_memory(d.numpy(), y.numpy())
    (d * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * d.numpy())  # d is a constant
    y.detach_()
    assert y.is_leaf and not y.requires_grad


def test_requires_grad_flags_follow_pytorch(rng):
    x = leaf(rng, 3)
    with pytest.raises(AutogradError, match="you can only change the requires_grad flag of leaf tensors; this one was "
                                            "computed by mul"):
        (x * 2).requires_grad = False
    with pytest.raises(DTypeError, match="only tensors of floating point dtype can require gradients, got int64"):
        fxkit.tensor([1, 2]).requires_grad_()
    x.requires_grad = False
    assert not (x * 2).requires_grad


def test_factories_take_requires_grad():
    for t in (fxkit.zeros(2, 3, requires_grad=True), fxkit.ones(2, requires_grad=True),
              fxkit.randn(2, requires_grad=True), fxkit.rand(2, requires_grad=True),
              fxkit.full((2,), 1.5, requires_grad=True), fxkit.empty(2, requires_grad=True),
              fxkit.arange(0.0, 3.0, requires_grad=True), fxkit.tensor([1.0, 2.0], requires_grad=True),
              fxkit.zeros_like(fxkit.ones(2), requires_grad=True)):
        assert t.requires_grad and t.is_leaf
    assert not fxkit.zeros(2).requires_grad


def test_parameters_require_grad_and_modules_can_freeze_them():
    layer = nn.Linear(3, 2)
    assert all(p.requires_grad and p.is_leaf for p in layer.parameters())
    assert not nn.Parameter(fxkit.ones(2), requires_grad=False).requires_grad
    layer.requires_grad_(False)
    assert not layer(fxkit.ones(1, 3)).requires_grad


# -- retain_graph, autograd.grad, hooks -----------------------------------------------------------------------
def test_second_backward_needs_retain_graph(rng):
    x = leaf(rng, 3)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * x.numpy())
    with pytest.raises(AutogradError, match="trying to backward through the graph a second time .* pass "
                                            "retain_graph=True"):
        y.backward()
    z = (x + 1).sum()  # nothing saved: a second pass is fine, as in PyTorch
    z.backward()
    z.backward()


def test_autograd_grad_returns_instead_of_accumulating(rng):
    x, w = leaf(rng, 3), leaf(rng, 3)
    y = (x * w).sum() + x.sum()
    gx, = fxkit.autograd.grad(y, x, retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), w.numpy() + 1)
    assert x.grad is None and w.grad is None
    unused = leaf(rng, 2)
    with pytest.raises(AutogradError, match="input 1 was not used to compute the outputs; pass allow_unused=True"):
        fxkit.autograd.grad(y, [x, unused], retain_graph=True)
    assert fxkit.autograd.grad(y, [w, unused], allow_unused=True)[1] is None
    h = x * 2  # a non-leaf input
    gh, = fxkit.autograd.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy())
    with pytest.raises(AutogradError, match="create_graph=True: higher-order gradients are not supported"):
        fxkit.autograd.grad((x * x).sum(), x, create_graph=True)


def test_backward_inputs_limits_accumulation(rng):
    x, w = leaf(rng, 3), leaf(rng, 3)
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), x.numpy())


def test_hooks_see_and_replace_gradients(rng):
    x = leaf(rng, 3)
    seen = []
    handle = x.register_hook(lambda g: seen.append(g.numpy().copy()))
    y = x * 3
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(seen[0], np.full(3, 30.0))
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 30.0))
    handle.remove()
    (x * 1).sum().backward()
    assert len(seen) == 1


def test_grad_never_shares_memory_with_a_tensor_someone_else_holds(rng):
    # .grad is written in place later, so a gradient another tensor refers to must be copied; one only
    # the engine holds becomes .grad as it is (PyTorch's AccumulateGrad steals it the same way).
    a, b = leaf(rng, 3), leaf(rng, 3)
    (a + b).sum().backward()  # add hands the same gradient to both leaves
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    w = leaf(rng, 2, 3)
    v = fxkit.from_numpy(np.ones((3, 2)))
    y = w.t()
    y.backward(v, retain_graph=True)  # t's rule gives back a view of the caller's gradient
    y.backward(v)
    np.testing.assert_allclose(v.numpy(), np.ones((3, 2)))
    np.testing.assert_allclose(w.grad.numpy(), np.full((2, 3), 2.0))
    x = leaf(rng, 4)
    kept = []
    z = x + 0
    z.register_hook(kept.append)  # keeps the gradient add then hands on to x
    (z * fxkit.from_numpy(np.full(4, 2.0))).sum().backward()
    x.grad.numpy()[:] = 7.0  # .grad belongs to x alone
    np.testing.assert_allclose(kept[0].numpy(), np.full(4, 2.0))
    m = leaf(rng, 5)
    h = leaf(rng, 5)
    out = m * h
    out.sum().backward()
    (m * h).sum().backward()  # the second backward adds into the first's .grad in place
    np.testing.assert_allclose(m.grad.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(h.grad.numpy(), 2 * m.numpy())


def test_saved_values_are_released_after_backward(rng):
    x = leaf(rng, 3)
    y = x.exp()
    node = y.grad_fn
    y.sum().backward()
    assert node.freed and node.out_data is None and node.args is None


def test_graph_introspection(rng):
    x, w = leaf(rng, 2, 3), leaf(rng, 3)
    y = (x * w).relu()
    assert repr(y.grad_fn) == "<relu_backward>"
    (mul, _), = y.grad_fn.next_functions
    assert mul.name() == "mul_backward" and mul.next_functions == ((None, 0), (None, 0))


# -- ops whose gradients follow conventions or randomness -----------------------------------------------------
def test_dropout_gradient_is_the_mask_it_drew(rng):
    x = leaf(rng, 200, dtype=np.float32)
    fxkit.manual_seed(7)
    y = F.dropout(x, 0.3)
    fxkit.manual_seed(7)
    with fxkit.no_grad():
        plain = F.dropout(x, 0.3)
    np.testing.assert_array_equal(y.numpy(), plain.numpy())  # recording draws exactly as the op
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (y.numpy() != 0) / 0.7, rtol=1e-6)


def test_max_pool2d_sends_gradients_to_the_picked_inputs(rng):
    torch = pytest.importorskip("torch")
    a = (rng.random((2, 3, 7, 7)) * 4 - 2).astype(np.float32)
    x = fxkit.from_numpy(a).requires_grad_()
    values, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    (values * values).sum().backward()
    t = torch.from_numpy(a).requires_grad_()
    tv = torch.nn.functional.max_pool2d(t, 3, 2, 1)
    (tv * tv).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("options", [{"padding_idx": 1}, {"padding_idx": -1, "scale_grad_by_freq": True},
                                     {"scale_grad_by_freq": True}])
def test_embedding_gradient_conventions_match_torch(rng, options):
    torch = pytest.importorskip("torch")
    idx = rng.integers(0, 6, size=(3, 5))
    w = (rng.random((6, 4)) * 2 - 1).astype(np.float32)
    g = (rng.random((3, 5, 4)) * 2 - 1).astype(np.float32)
    x = fxkit.from_numpy(w).requires_grad_()
    F.embedding(fxkit.from_numpy(idx), x, **options).backward(fxkit.from_numpy(g))
    t = torch.from_numpy(w).requires_grad_()
    torch.nn.functional.embedding(torch.from_numpy(idx), t, **options).backward(torch.from_numpy(g))
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_rounding_ops_have_zero_gradients_like_torch(rng):
    x = leaf(rng, 5)
    (x.floor() + x.ceil() + x.round() + x.sign() + x.div(0.3, rounding_mode="floor")).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(5))


@pytest.mark.parametrize("name", ["relu", "relu6", "leaky_relu"])
def test_relu_family_gradients_at_nan_kinks_and_bounds_match_torch(name):
    """PyTorch's threshold/hardtanh backward zero a gradient only where the value is at or past a bound: a
    NaN passes its gradient on."""
    torch = pytest.importorskip("torch")
    values = np.array([np.nan, -1.0, -0.0, 0.0, 0.5, 6.0, 7.0], np.float32)
    x = fxkit.from_numpy(values.copy()).requires_grad_()
    getattr(F, name)(x).backward(fxkit.ones(7))
    t = torch.from_numpy(values.copy()).requires_grad_()
    getattr(torch.nn.functional, name)(t).backward(torch.ones(7))
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_a_short_training_loop_lowers_the_loss(rng):
    fxkit.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    x = fxkit.from_numpy(rng.standard_normal((64, 4)).astype(np.float32))
    y = fxkit.from_numpy((x.numpy()[:, 0] > 0).astype(np.int64) + (x.numpy()[:, 1] > 0))
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        for p in model.parameters():
            p.grad = None
        loss.backward()
        with fxkit.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
    assert losses[-1] < 0.5 * losses[0]


def test_grad_mode_is_per_thread():
    """no_grad in one thread leaves recording on in another (the pipeline trains stages on threads)."""
    import threading

    seen = {}
    entered, release = threading.Event(), threading.Event()

    def inside_no_grad():
        with fxkit.no_grad():
            entered.set()
            release.wait(5)
            seen["worker"] = fxkit.is_grad_enabled()

    worker = threading.Thread(target=inside_no_grad)
    worker.start()
    entered.wait(5)
    x = fxkit.ones(3, requires_grad=True)
    y = (x * 2).sum()
    seen["main"] = fxkit.is_grad_enabled()
    release.set()
    worker.join()
    y.backward()
    assert seen == {"worker": False, "main": True}
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0, np.float32))


def test_concurrent_backward_into_one_parameter_loses_nothing():
    # As PyTorch: 4 threads x 100 backward calls into one parameter accumulate exactly 400.
    w = nn.Parameter(fxkit.zeros(512, 512, dtype=fxkit.float64))
    start = threading.Barrier(4, timeout=10)

    def work():
        start.wait()
        for _ in range(100):
            (w * 1.0).sum().backward()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(np.unique(w.grad.numpy()), [400.0])


@pytest.mark.parametrize("in_channels, out_channels, k", [(16, 4, 3), (4, 16, 1)],
                         ids=["more-columns-than-channels", "fewer"])
def test_a_conv_weight_gradient_becomes_grad_without_a_copy(in_channels, out_channels, k, monkeypatch):
    """The weight gradient's product is an array of its own whichever orientation computed it, so the leaf's
    ``.grad`` takes it as it is (AccumulateGrad): a copy of every weight gradient cost ResNet-18 30 ms a step."""
    from fxkit.runtime.autograd import engine

    seen = []
    sole_owner = engine._sole_owner
    monkeypatch.setattr(engine, "_sole_owner", lambda g: seen.append(sole_owner(g)) or seen[-1])
    rng = np.random.default_rng(0)
    x = fxkit.from_numpy(rng.standard_normal((2, in_channels, 6, 6)).astype(np.float32))
    w = fxkit.from_numpy(rng.standard_normal((out_channels, in_channels, k, k)).astype(np.float32)).requires_grad_()
    fxkit.conv2d(x, w, None, 1, k // 2).sum().backward()
    assert seen == [True]
