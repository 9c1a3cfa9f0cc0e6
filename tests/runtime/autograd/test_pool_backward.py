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
