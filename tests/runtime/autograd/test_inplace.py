"""In-place operations under autograd: recorded like PyTorch where it can, a clear error
where a write would corrupt a value saved for backward or cannot be recorded."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import AutogradError
from fxkit.nn import functional as F


def leaf(rng, *shape):
    return fxkit.from_numpy(rng.random(shape) * 4 - 2).requires_grad_()


def test_inplace_add_on_a_non_leaf_is_recorded(rng):
    x, y = leaf(rng, 3, 4), leaf(rng, 4)
    h = x * 2
    h += y
    assert h.grad_fn.name() == "add_backward" and h._version == 1
    (h * h).sum().backward()
    expected = 2 * (2 * x.numpy() + y.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 2 * expected)
    np.testing.assert_allclose(y.grad.numpy(), expected.sum(0))


def test_inplace_mul_keeps_the_value_its_backward_needs(rng):
    x, y = leaf(rng, 5), leaf(rng, 5)
    h = x + 0
    h.mul_(y)
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.numpy())
    np.testing.assert_allclose(y.grad.numpy(), x.numpy())


def test_inplace_relu_writes_through_and_a_later_write_is_caught_like_torch(rng):
    torch = pytest.importorskip("torch")
    x = leaf(rng, 2, 3)
    h = x * 2
    before = h._data
    assert F.relu(h, inplace=True) is h and h._data is before  # written in place, no new array
    F.relu(h, inplace=True)  # overwrites the result the first ReLU's gradient reads
    with pytest.raises(AutogradError, match="relu: one of the tensors needed for gradient computation has been "
                                            "modified by an inplace operation: the result of relu"):
        h.sum().backward()
    t = torch.from_numpy(x.numpy()).requires_grad_()
    t_h = t * 2
    torch.relu_(t_h)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.relu_(t_h).sum().backward()


def test_resnet_style_inplace_add_and_relu_match_torch(rng):
    torch = pytest.importorskip("torch")
    a = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    fx_conv, t_conv = nn.Conv2d(3, 3, 3, padding=1), torch.nn.Conv2d(3, 3, 3, padding=1)
    t_conv.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in fx_conv.state_dict().items()})
    x, t = fxkit.from_numpy(a).requires_grad_(), torch.from_numpy(a).requires_grad_()
    out = fx_conv(x)
    out += x
    nn.ReLU(inplace=True)(out).sum().backward()
    t_out = t_conv(t)
    t_out += t
    torch.relu_(t_out).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fx_conv.weight.grad.numpy(), t_conv.weight.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_overwriting_a_saved_output_is_an_error(rng):
    x = leaf(rng, 3)
    y = x.exp()
    y.mul_(2)  # exp's backward reads its output, which this overwrites
    with pytest.raises(AutogradError, match=r"exp: one of the tensors needed for gradient computation has been "
                                            r"modified by an inplace operation: the result of exp is at version 1; "
                                            r"expected version 0"):
        y.sum().backward()


def test_overwriting_a_saved_input_that_needs_no_grad_is_an_error(rng):
    w = leaf(rng, 3)
    x = fxkit.from_numpy(rng.random(3))
    y = (x * w).sum()
    x += 1
    with pytest.raises(AutogradError, match="the input 'input' of mul is at version 1; expected version 0"):
        y.backward()


def test_inplace_on_a_leaf_that_requires_grad(rng):
    w = leaf(rng, 3)
    with pytest.raises(AutogradError, match=r"add: a leaf tensor that requires grad is used in an in-place "
                                            r"operation.*fxkit.no_grad\(\)"):
        w += 1
    with pytest.raises(AutogradError, match="setitem: a leaf tensor that requires grad"):
        w[0] = 1.0
    before = w.numpy().copy()
    with fxkit.no_grad():
        w -= 0.5
        w.mul_(2)
    np.testing.assert_allclose(w.numpy(), (before - 0.5) * 2)
    assert w._version == 2 and w.is_leaf


def test_setitem_is_recorded(rng):
    x, v = leaf(rng, 4, 3), leaf(rng, 3)
    h = x * 1
    h[1] = v * 2
    h[[0, 2], 1] = 0.0
    (h * h).sum().backward()
    expected_x = 2 * x.numpy()
    expected_x[1] = 0
    expected_x[[0, 2], 1] = 0
    np.testing.assert_allclose(x.grad.numpy(), expected_x)
    np.testing.assert_allclose(v.grad.numpy(), 8 * v.numpy())


def test_setitem_of_a_value_that_requires_grad_into_a_plain_buffer(rng):
    w = leaf(rng, 3)
    buffer = fxkit.zeros(2, 3, dtype=fxkit.float64)
    buffer[0] = w
    buffer[1] = w * 3
    assert buffer.requires_grad and not buffer.is_leaf
    buffer.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 4.0))


def test_inplace_through_a_view_is_refused_with_the_way_out(rng):
    x = leaf(rng, 3, 4)
    h = x * 2
    row = h[0]
    with pytest.raises(AutogradError, match=r"add: in-place operation on a view of another tensor while autograd "
                                            r"records it.*base\[index\] = value"):
        row += 1
    buffer = fxkit.zeros(3, 4, dtype=fxkit.float64)
    with pytest.raises(AutogradError, match="in-place operation on a view of another tensor"):
        buffer[0] += x[0]
    buffer[0] = buffer[0] + x[0]  # the way out
    buffer.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[0], np.ones(4))


def test_inplace_dropout_and_activations_match_out_of_place(rng):
    x = leaf(rng, 50)
    for fn in (lambda t, i: F.relu(t, inplace=i), lambda t, i: F.leaky_relu(t, 0.2, i), lambda t, i: F.silu(t, i),
               lambda t, i: F.dropout(t, 0.4, True, i)):
        fxkit.manual_seed(3)
        expected, = fxkit.autograd.grad((fn(x * 1, False) ** 2).sum(), x)
        fxkit.manual_seed(3)
        h = x * 1
        out = fn(h, True)
        assert out is h and h._version == 1
        got, = fxkit.autograd.grad((out ** 2).sum(), x)
        np.testing.assert_allclose(got.numpy(), expected.numpy())


def test_views_share_the_version_counter(rng):
    x = fxkit.from_numpy(rng.random((2, 3)))
    w = leaf(rng, 3)
    y = (x * w).sum()  # mul saves x
    z = (x[0] * w).sum()  # and here the view x[0]
    x[0, 1] = 5.0  # a write through the base counts for the view
    with pytest.raises(AutogradError, match="modified by an inplace operation"):
        z.backward()
    x[1].add_(1)  # and a write through a view counts for the base
    with pytest.raises(AutogradError, match="the input 'input' of mul is at version 2"):
        y.backward()
