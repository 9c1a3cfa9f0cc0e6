"""Shared bits of the ports of torch.fx's tests (tests/peer): inputs, comparisons, a module, a check."""
import numpy as np

import fxkit
from tests.graph.builders import MyModule  # noqa: F401  (the original tests' MyModule, shared)


def tensor(*values, dtype=np.float32):
    """``torch.tensor([...])`` of the original tests."""
    return fxkit.tensor(np.array(values, dtype=dtype))


def randn(*shape, seed=0):
    """``torch.randn(*shape)``, reproducible."""
    return fxkit.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def assert_equal(actual, expected):
    """``torch.equal`` / ``self.assertEqual`` on tensors (or nested tuples of them)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_equal(a, e)
        return
    np.testing.assert_array_equal(np.asarray(actual.numpy() if hasattr(actual, "numpy") else actual),
                                  np.asarray(expected.numpy() if hasattr(expected, "numpy") else expected))


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    """``torch.testing.assert_close`` / ``torch.allclose``."""
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol, atol)
        return
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=rtol, atol=atol)



def check_graph_module(m, args, kwargs=None):
    """torch.fx's ``checkGraphModule``: trace ``m``, lint the graph, and compare with ``m`` itself."""
    kwargs = kwargs or {}
    ref_outs = m(*args, **kwargs)
    gm = fxkit.symbolic_trace(m)
    gm.graph.lint()
    test_outs = gm(*args, **kwargs)
    if hasattr(ref_outs, "numpy") or isinstance(ref_outs, (tuple, list)):
        assert_equal(test_outs, ref_outs)
    else:
        assert test_outs == ref_outs
