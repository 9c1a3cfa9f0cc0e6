"""index_put beyond the op cases: ATen's None entries, the in-place spellings
(``index_put_``, ``scatter_``, ``scatter_add_``, ``index_add_``) agreeing with
``x[idx] = v`` and the out-of-place ops, under autograd and tracing, and errors."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import DTypeError, ShapeError


def test_none_entry_is_a_whole_dimension(rng):
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    values = rng.standard_normal((2, 2, 3)).astype(np.float32)
    out = fxkit.from_numpy(a).index_put((None, fxkit.tensor([3, 0])), fxkit.from_numpy(values))
    expected = a.copy()
    expected[:, [3, 0]] = values
    np.testing.assert_array_equal(out.numpy(), expected)


def test_inplace_spellings_write_what_setitem_and_the_ops_compute(rng):
    a = fxkit.from_numpy(rng.standard_normal((4, 5)).astype(np.float32))
    rows, cols, v = fxkit.tensor([0, 3]), fxkit.tensor([4, 1]), fxkit.tensor([1.5, -2.0])
    by_setitem = (a * 1)
    by_setitem[rows, cols] = v
    by_method = (a * 1)
    assert by_method.index_put_((rows, cols), v) is by_method
    np.testing.assert_array_equal(by_method.numpy(), by_setitem.numpy())
    np.testing.assert_array_equal(a.index_put((rows, cols), v).numpy(), by_setitem.numpy())
    index = fxkit.tensor([[0, 1], [2, 2], [1, 0], [4, 4]])
    src = fxkit.ones(4, 2)
    for name in ("scatter", "scatter_add"):
        b = (a * 1)
        getattr(b, name + "_")(1, index, src)
        np.testing.assert_array_equal(b.numpy(), getattr(a, name)(1, index, src).numpy())
    c = (a * 1)
    c.index_add_(0, fxkit.tensor([1, 1]), fxkit.ones(2, 5))
    np.testing.assert_array_equal(c.numpy(), a.index_add(0, fxkit.tensor([1, 1]), fxkit.ones(2, 5)).numpy())


def test_inplace_index_put_under_autograd_and_tracing(rng):
    w = fxkit.from_numpy(rng.standard_normal((3, 4))).requires_grad_()
    y = w * 2
    y.index_put_((fxkit.tensor([1]),), fxkit.zeros(4, dtype=fxkit.float64), accumulate=False)
    y.sum().backward()
    expected = np.full((3, 4), 2.0)
    expected[1] = 0
    np.testing.assert_array_equal(w.grad.numpy(), expected)

    def fn(x):
        x = x * 1
        x.scatter_add_(1, fxkit.tensor([[0, 0], [1, 2]]), fxkit.ones(2, 2))
        return x

    gm = fxkit.symbolic_trace(fn)
    assert any(n.is_op(fxkit.ops.scatter_add) for n in gm.graph.nodes)
    x = fxkit.randn(2, 3)
    np.testing.assert_array_equal(gm(x).numpy(), fn(x).numpy())


def test_errors_say_what_to_pass():
    x = fxkit.zeros(3, 4)
    with pytest.raises(DTypeError, match="values must be a tensor"):
        x.index_put((fxkit.tensor([0]),), 1.0)
    with pytest.raises(DTypeError, match="must be long, int or bool tensors, got float32"):
        x.index_put((fxkit.tensor([0.0]),), fxkit.tensor(1.0))
    with pytest.raises(DTypeError, match="source and destination dtypes match"):
        x.index_put((fxkit.tensor([0]),), fxkit.tensor(1))
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        x.index_put((fxkit.tensor([0, 1]),), fxkit.ones(3))
    with pytest.raises(fxkit.IndexOutOfRangeError, match=r"shape of the mask \[4\] at index 0 does not match"):
        x.index_put((fxkit.tensor([True, False, True, True]),), fxkit.tensor(1.0), accumulate=True)
    with pytest.raises(ValueError, match="reduce argument must be either 'add' or 'multiply'"):
        x.scatter(0, fxkit.tensor([[0]]), fxkit.ones(1, 1), reduce="max")
