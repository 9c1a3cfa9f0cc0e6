"""The memory plan: dead buffers of the same shape and dtype are reused through ``out=``,
never while a view of them is alive, never inputs, parameters or outputs; which ops run
as a ufunc comes from the registry-keyed table."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from fxkit.backends.memory_plan import UFUNC_FORMS, UfuncForm, allocates, plan_buffers, ufunc_forms
from fxkit.backends.specialize import Specialize
from fxkit.runtime.meta import TensorMeta
from tests.backends.examples import chain


def specialized(fn, *specs):
    """``fn`` traced and specialised to ``specs`` (shape tuples, float32, or TensorMetas)."""
    metas = [s if isinstance(s, TensorMeta) else TensorMeta(s, fxkit.float32) for s in specs]
    return Specialize(metas)(fxkit.symbolic_trace(fn))


def plan(fn, *specs):
    """``{node name: holder name}`` of the plan, and the forms by node name."""
    nodes = list(specialized(fn, *specs).graph.nodes)
    forms = ufunc_forms(nodes)
    return {n.name: h.name for n, h in plan_buffers(nodes, forms).items()}, {n.name: f for n, f in forms.items()}


def check_compiled(fn, *inputs):
    expected = fn(*inputs)
    got = fxkit.compile(fn)(*inputs)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_the_chain_allocates_once():
    buffers, forms = plan(chain, (5,))
    assert forms["mul"] == UfuncForm("multiply", 2)
    assert buffers == {f"mul_{i}": ("mul" if i == 1 else f"mul_{i - 1}") for i in range(1, 10)}


def test_inputs_and_parameters_are_never_written():
    def f(x):
        return (x * 2) * 3

    buffers, _ = plan(f, (4,))
    assert buffers == {"mul_1": "mul"}


def test_a_live_view_keeps_its_buffer(rng):
    def f(x):
        y = x * 2
        v = y.view(2, 2)
        z = y + 1           # y dies here, but v still reads its memory
        return z.view(2, 2) + v

    buffers, _ = plan(f, (4,))
    assert "add" not in buffers
    check_compiled(f, fxkit.from_numpy(rng.standard_normal(4).astype(np.float32)))


def test_a_buffer_read_through_a_view_by_the_same_op_is_not_written(rng):
    def f(x):
        y = x * 2
        return y + y.t()    # both die at the add; writing into y would overwrite what y.t() reads

    buffers, _ = plan(f, (3, 3))
    assert buffers == {}
    check_compiled(f, fxkit.from_numpy(rng.standard_normal((3, 3)).astype(np.float32)))


def test_outputs_are_never_reused():
    def f(x):
        a = x * 2
        return a, a + 1

    buffers, _ = plan(f, (4,))
    assert buffers == {}


def test_shapes_and_dtypes_must_match(rng):
    def f(x):
        a = x * 2
        b = ops.sum(a, 1)   # a (4x5) dies: too large for anything after
        c = b * 3           # into b
        return (c > 0) * 1.5  # gt's bool result takes no float buffer; the product takes c's

    buffers, forms = plan(f, (4, 5))
    assert buffers == {"mul_1": "sum", "mul_2": "mul_1"}
    assert forms["gt"] == UfuncForm("greater", 2)
    check_compiled(f, fxkit.from_numpy(rng.standard_normal((4, 5)).astype(np.float32)))


def test_results_of_allocating_ops_are_reused():
    def f(x, w):
        return ops.relu(ops.matmul(x, w))

    buffers, forms = plan(f, (4, 5), (5, 6))
    assert forms["relu"] == UfuncForm("maximum", 1, (False,))
    assert buffers == {"relu": "matmul"}


@pytest.mark.parametrize("spec, kwargs", [
    (TensorMeta((4,), fxkit.int32), {}),          # integer tensors keep their impls' error checks
    (TensorMeta((4,), fxkit.float16), {}),        # half precision computes in float32 in the impls
    (TensorMeta((), fxkit.float32), {}),          # numpy returns scalars for 0-d
    (TensorMeta((4,), fxkit.float32), {"alpha": 2}),
])
def test_ops_outside_the_ufunc_form_call_their_implementation(spec, kwargs):
    def f(x):
        return ops.add(x, x, **kwargs)

    assert plan(f, spec)[1] == {}


def test_promotion_is_applied_before_choosing_the_form():
    def f(x):
        return x * 2.5          # int32 * float -> float32 inputs

    assert plan(f, TensorMeta((4,), fxkit.int32))[1] == {"mul": UfuncForm("multiply", 2)}


def test_allocates_excludes_in_place_calls_and_views():
    def f(x):
        a = ops.relu(x * 1, inplace=True)
        return ops.einsum("ij->ji", a), a.view(-1), ops.exp(a)

    nodes = {n.name: n for n in specialized(f, (2, 3)).graph.nodes}
    assert allocates(nodes["mul"]) and allocates(nodes["exp"])
    assert not allocates(nodes["relu"]) and not allocates(nodes["einsum"]) and not allocates(nodes["view"])


def test_the_table_is_keyed_by_registry_ops():
    assert all(isinstance(op, fxkit.runtime.op.Op) for op in UFUNC_FORMS)
    for op, form in UFUNC_FORMS.items():
        assert op.kind == "elementwise", op.name
        assert callable(getattr(np, form.ufunc)) and getattr(np, form.ufunc).nin == form.inputs + len(form.extra)


# -- storage that escapes the plan ------------------------------------------------------------------------
_KEPT = []


@fxkit.wrap
def capture(t):
    """A wrapped function that keeps what it is given (an activation logger)."""
    _KEPT.append(t)
    return t.sum()


def _captures(x):
    a = x * 2.0
    s = capture(a)      # a dies here for the graph, but _KEPT still holds it
    b = x + s           # same shape and dtype as a: the first candidate for a's buffer
    return b * 3.0


def test_storage_given_to_a_wrapped_function_escapes_the_plan():
    buffers, _ = plan(_captures, (4,))
    assert "mul" not in buffers.values()


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.slow)])
def test_values_a_wrapped_function_kept_are_never_overwritten(backend, rng):
    if backend == "numba":
        pytest.importorskip("numba")
    x = fxkit.from_numpy(rng.standard_normal(4).astype(np.float32))
    compiled = fxkit.compile(_captures, backend=backend, example_inputs=[x])
    _KEPT.clear()
    got = compiled(x)
    np.testing.assert_array_equal(_KEPT[-1].numpy(), x.numpy() * np.float32(2.0))
    x64 = x.numpy().astype(np.float64)
    expected = (x64 + (2.0 * x64).sum()) * 3.0
    # x + sum(2x) can cancel to near zero, where a relative bound means nothing: the float32
    # rounding error is bounded by a few eps times the magnitudes that went into each element.
    magnitude = 3.0 * (np.abs(x64) + np.abs(2.0 * x64).sum())
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=8 * np.finfo(np.float32).eps * magnitude.max())

