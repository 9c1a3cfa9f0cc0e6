"""`DelegateBackend` with a delegate written in Python: partitions, batch-free runners, the fallback."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from fxkit.backends import register_backend
from fxkit.backends.delegate import DelegateBackend
from fxkit.errors import LoweringError
from fxkit.runtime.tensor import Tensor
from tests.backends.examples import randn


class ElementwiseDelegate:
    """Takes elementwise ops only, and runs a partition by interpreting its child module."""

    builds = []

    def __init__(self, refuse_symbolic=False):
        self.refuse_symbolic = refuse_symbolic

    def is_supported(self, node):
        return getattr(node.target, "kind", None) == "elementwise"

    def describe(self, child):
        return f"{len(child.graph.nodes)} nodes interpreted"

    def prepare(self, child, specs):
        if self.refuse_symbolic and not all(type(d) is int for s in specs for d in s.shape):
            raise LoweringError("symbolic sizes are not taken")
        key = (str(child.graph), tuple((tuple(map(str, s.shape)), s.dtype.name) for s in specs))

        def build():
            ElementwiseDelegate.builds.append(key)

            def run(*arrays):
                out = child(*[fxkit.from_numpy(np.asarray(a)) for a in arrays])
                return tuple(o._data for o in out) if isinstance(out, tuple) else out._data
            run.__name__ = "interpreted"
            return run
        return key, build


register_backend(DelegateBackend("python_delegate", ElementwiseDelegate))


def model(x, w):
    h = (x * 2.0 + 1.0).tanh()
    return ops.matmul(h, w).relu() - 0.5


def test_supported_ops_run_in_partitions_around_the_rest(rng):
    x, w = randn(rng, 4, 3), randn(rng, 3, 5)
    compiled = fxkit.compile(model, backend="python_delegate", example_inputs=[x, w])
    calls = [n.target if type(n.target) is str else n.target.name for n in compiled.graph.nodes if n.op == "call"]
    assert calls == ["supported_0", "matmul", "supported_1"]
    expected = np.maximum(np.tanh(x.numpy() * 2.0 + 1.0) @ w.numpy(), 0) - 0.5
    np.testing.assert_allclose(compiled(x, w).numpy(), expected, rtol=1e-6, atol=1e-6)
    assert isinstance(compiled(x, w), Tensor)
    assert "interpreted" in compiled.code
    assert compiled.kernel_sources()["supported_0"].startswith("# runs on python_delegate:")


def test_runners_are_built_once_for_every_batch_size(rng):
    ElementwiseDelegate.builds.clear()
    compiled = fxkit.compile(model, backend="python_delegate")
    w = randn(rng, 3, 5)
    for n in (2, 6, 1):
        x = randn(rng, n, 3)
        expected = np.maximum(np.tanh(x.numpy() * 2.0 + 1.0) @ w.numpy(), 0) - 0.5
        np.testing.assert_allclose(compiled(x, w).numpy(), expected, rtol=1e-6, atol=1e-6)
    assert compiled.compile_count == 3
    assert len(ElementwiseDelegate.builds) == 2 and len(compiled.backend.runners) == 2


def test_a_delegate_refusing_symbolic_sizes_gets_concrete_ones(rng):
    ElementwiseDelegate.builds.clear()
    compiled = fxkit.compile(model, backend="python_delegate", refuse_symbolic=True)
    w = randn(rng, 3, 5)
    for n in (2, 6):
        x = randn(rng, n, 3)
        expected = np.maximum(np.tanh(x.numpy() * 2.0 + 1.0) @ w.numpy(), 0) - 0.5
        np.testing.assert_allclose(compiled(x, w).numpy(), expected, rtol=1e-6, atol=1e-6)
    assert len(compiled.backend.runners) == 4  # two partitions per batch size


def test_each_compiled_module_has_its_own_runners(rng):
    first = fxkit.compile(model, backend="python_delegate", example_inputs=[(2, 3), (3, 5)])
    second = fxkit.compile(model, backend="python_delegate", example_inputs=[(2, 3), (3, 5)])
    assert first.backend is not second.backend
    assert len(first.backend.runners) == len(second.backend.runners) == 2


def test_numba_runs_the_rest_when_asked(rng):
    pytest.importorskip("numba")

    def f(x, w):
        return ops.matmul(ops.matmul(x, w).exp() * 2.0, w.T)  # exp * 2 is supported; the matmuls are not

    x, w = randn(rng, 4, 3) * 0.1, randn(rng, 3, 3) * 0.1
    compiled = fxkit.compile(f, backend="python_delegate", example_inputs=[x, w], fallback="numba")
    expected = (np.exp(x.numpy() @ w.numpy()) * 2.0) @ w.numpy().T
    np.testing.assert_allclose(compiled(x, w).numpy(), expected, rtol=1e-5)


def test_an_unknown_fallback_is_refused():
    with pytest.raises(LoweringError, match="no backend named 'tpu'"):
        fxkit.compile(model, backend="python_delegate", fallback="tpu")


def test_tuples_stay_inside_a_partition(rng):
    def halves(x, w):
        a, b = ops.matmul(x, w).chunk(2, dim=1)  # chunk + getitem: supported only together with matmul
        return (a.tanh() * b).sum()

    class WithViews(ElementwiseDelegate):
        def is_supported(self, node):
            return super().is_supported(node) or getattr(node.target, "name", None) in ("chunk", "getitem")

    register_backend(DelegateBackend("python_delegate_views", WithViews))
    x, w = randn(rng, 4, 3), randn(rng, 3, 6)
    compiled = fxkit.compile(halves, backend="python_delegate_views", example_inputs=[x, w])
    h = x.numpy() @ w.numpy()
    terms = np.tanh(h[:, :3]) * h[:, 3:]
    # atol: the terms may nearly cancel, and the sum's float32 error scales with sum|terms|
    np.testing.assert_allclose(compiled(x, w).numpy(), terms.sum(), rtol=1e-5, atol=1e-5 * np.abs(terms).sum())
    parent = compiled.graph_module
    children = [parent.get_submodule(n.target) for n in parent.graph.nodes if "partition" in n.meta]
    chunks = [(child, n) for child in children for n in child.graph.nodes if getattr(n.target, "name", None) == "chunk"]
    assert len(chunks) == 1
    child, chunk = chunks[0]
    assert chunk.users and all(u.graph is child.graph for u in chunk.users)
