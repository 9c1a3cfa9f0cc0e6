"""max_pool2d's backward sends each output gradient to its window's maximum: with disjoint windows
(a plain scatter) and overlapping ones (a summing scatter) alike, as PyTorch does."""
import numpy as np
import pytest

import fxkit
from fxkit.nn import functional as F


@pytest.mark.parametrize("kernel, stride, padding, dilation", [
    (2, 2, 0, 1),  # disjoint: the plain scatter
    (3, 3, 1, 1),  # disjoint with padding
    (2, 3, 0, 2),  # dilated span 3 == stride: still disjoint
    (3, 2, 1, 1),  # overlapping: the summing scatter
    (3, 1, 0, 1),  # heavily overlapping
])
def test_max_pool2d_backward_matches_pytorch(kernel, stride, padding, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    # NOTE: few distinct values, so ties and elements that win several windows are common
    x = rng.integers(-3, 4, (2, 3, 9, 10)).astype(np.float32)
    upstream_shape = torch.nn.functional.max_pool2d(torch.from_numpy(x), kernel, stride, padding, dilation).shape
    upstream = rng.standard_normal(tuple(upstream_shape)).astype(np.float32)

    xt = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.max_pool2d(xt, kernel, stride, padding, dilation).backward(torch.from_numpy(upstream))
    xf = fxkit.from_numpy(x).requires_grad_()
    F.max_pool2d(xf, kernel, stride, padding, dilation).backward(fxkit.from_numpy(upstream))
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, kernel, stride, padding", [
    ((32, 16, 8, 8), 2, 2, 0),  # disjoint, large: the rows loop writes
    ((2, 3, 6, 8), 2, 2, 0),  # disjoint, small: numpy's scatter
    ((8, 8, 9, 9), 3, 2, 1),  # overlapping: the summing scatter
])
def test_the_backward_op_gives_the_scatter_s_bits(shape, kernel, stride, padding, rng):
    """``max_pool2d_with_indices_backward`` is the zeros-then-scatter the rule used to spell in five ops: the same
    bits, whichever path runs (negative zeros included: a written -0.0 stays)."""
    x = fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))
    values, indices = F.max_pool2d(x, kernel, stride, padding, return_indices=True)
    g = rng.standard_normal(tuple(values.shape)).astype(np.float32)
    g[0, 0, 0, 0] = -0.0
    got = fxkit.ops.max_pool2d_with_indices_backward(fxkit.from_numpy(g), shape, kernel, stride, padding, 1, False,
                                                     indices)
    lead = shape[:-2]
    planes = fxkit.zeros(lead + (shape[-2] * shape[-1],))
    spread = fxkit.ops.scatter if kernel <= stride else fxkit.ops.scatter_add
    expected = spread(planes, -1, indices.reshape(lead + (-1,)), fxkit.from_numpy(g).reshape(lead + (-1,)))
    np.testing.assert_array_equal(got.numpy().view(np.uint32), expected.reshape(shape).numpy().view(np.uint32))


def test_the_backward_op_refuses_an_index_outside_the_plane(rng):
    g = fxkit.from_numpy(rng.standard_normal((32, 16, 4, 4)).astype(np.float32))
    indices = fxkit.from_numpy(np.full((32, 16, 4, 4), 64, np.int64))
    with pytest.raises(fxkit.errors.IndexOutOfRangeError, match="max_pool2d_with_indices_backward: index 64 is out"):
        fxkit.ops.max_pool2d_with_indices_backward(g, (32, 16, 8, 8), 2, 2, 0, 1, False, indices)
    with pytest.raises(fxkit.errors.ShapeError, match="must have one shape"):
        fxkit.ops.max_pool2d_with_indices_backward(g, (32, 16, 8, 8), 2, 2, 0, 1, False, indices[:, :, :2])
