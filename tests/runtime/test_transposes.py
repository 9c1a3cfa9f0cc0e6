"""``x.T`` and ``x.mT``: eager against numpy, and traced as registry ops."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import FxkitError


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 3, 4), (1, 2, 3, 4)])
def test_T_reverses_every_dimension_like_numpy(rng, shape):
    a = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(fxkit.from_numpy(a).T.numpy(), a.T)


def test_mT_swaps_the_last_two_dimensions(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(fxkit.from_numpy(a).mT.numpy(), a.swapaxes(-1, -2))
    with pytest.raises(FxkitError, match="transpose: dimension out of range"):
        fxkit.ones(3).mT


def test_traced_transposes_are_registry_ops(rng):
    def f(x):
        return x.T + 1.0, x.mT @ x

    gm = fxkit.symbolic_trace(f)
    assert [n.target.name for n in gm.graph.nodes if n.op == "call"] == ["numpy_T", "add", "transpose", "matmul"]
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got = gm(fxkit.from_numpy(a))
    np.testing.assert_array_equal(got[0].numpy(), a.T + np.float32(1.0))
    np.testing.assert_allclose(got[1].numpy(), a.swapaxes(-1, -2).astype(np.float64) @ a, rtol=1e-5, atol=1e-6)
