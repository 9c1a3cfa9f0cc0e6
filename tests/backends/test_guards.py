"""Guards of compiled modules: a key per input signature, refusals that explain themselves
before any generated code runs, recompilation where no signature was fixed."""
import numpy as np
import pytest

import fxkit
from fxkit.backends.guards import as_specs, input_key, spec_key, specs_of
from fxkit.errors import DeviceError, DTypeError, GraphError, ShapeError
from fxkit.runtime.tensor import Tensor

_RUNS = []


@fxkit.wrap
def _count_run(x):
    """Runs only inside the generated code: counts the calls that got past the guard."""
    _RUNS.append(1)
    return x


def model(x, y):
    return _count_run(x * y + 1.0)


def randn(rng, *shape, dtype=np.float32):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(dtype))


@pytest.fixture
def compiled():
    compiled = fxkit.compile(model, example_inputs=[(4, 3), (4, 3)])
    _RUNS.clear()  # compiling traced it
    return compiled


def refused(compiled, *args):
    """The error a call raises; asserts the generated code never ran."""
    before = len(_RUNS)
    with pytest.raises(Exception) as info:
        compiled(*args)
    assert len(_RUNS) == before, "the generated code ran before the guard refused the inputs"
    return info


def test_matching_inputs_run(compiled, rng):
    x, y = randn(rng, 4, 3), randn(rng, 4, 3)
    np.testing.assert_allclose(compiled(x, y).numpy(), x.numpy() * y.numpy() + 1, rtol=1e-6)
    assert _RUNS == [1]


def test_wrong_rank_is_refused_before_running(compiled, rng):
    info = refused(compiled, randn(rng, 2, 4, 3), randn(rng, 4, 3))
    assert info.type is ShapeError
    assert str(info.value) == (
        "compiled model: input 1 (x) is f32[2, 4, 3] on cpu, compiled for f32[4, 3] on cpu: rank 3 instead of 2\n"
        "  hint: pass a rank-2 tensor (reshape it), or compile again with example inputs like this one "
        "(fxkit.compile(model, example_inputs=...))")


def test_wrong_dtype_is_refused_before_running(compiled, rng):
    info = refused(compiled, randn(rng, 4, 3), randn(rng, 4, 3, dtype=np.float64))
    assert info.type is DTypeError
    assert "input 2 (y) is f64[4, 3] on cpu, compiled for f32[4, 3] on cpu: dtype float64 instead of float32" \
        in str(info.value)
    assert "hint: cast it with .to(fxkit.float32), or compile again" in str(info.value)


class _FakeCuda:
    """Stands for a cuda device on machines without one: the guard reads only type and str."""

    type = "cuda"

    def __str__(self):
        return "cuda:0"


def test_wrong_device_is_refused_before_running(compiled, rng):
    on_gpu = Tensor._make(rng.standard_normal((4, 3)).astype(np.float32), _FakeCuda())
    info = refused(compiled, randn(rng, 4, 3), on_gpu)
    assert info.type is DeviceError
    assert str(info.value) == (
        "compiled model: input 2 (y) is on cuda:0, but the numpy backend runs on cpu\n"
        "  hint: move the input with .to('cpu'), or compile for that device with a backend that runs there")


def test_other_sizes_of_the_same_rank_recompile_once(compiled, rng):
    for _ in range(3):
        out = compiled(randn(rng, 7, 3), randn(rng, 7, 3))
    assert out.shape == (7, 3)
    assert compiled.compile_count == 2


def test_without_a_signature_another_dtype_or_rank_recompiles(rng):
    compiled = fxkit.compile(model)
    compiled(randn(rng, 4, 3), randn(rng, 4, 3))
    out = compiled(randn(rng, 4, 3, dtype=np.float64), randn(rng, 2, 4, 3, dtype=np.float64))
    assert out.dtype == fxkit.float64 and out.shape == (2, 4, 3)
    assert compiled.compile_count == 2


def test_wrong_number_of_inputs(compiled, rng):
    info = refused(compiled, randn(rng, 4, 3))
    assert info.type is GraphError
    assert str(info.value) == "compiled model takes 2 inputs (x, y), got 1"


def test_non_tensor_inputs(compiled, rng):
    info = refused(compiled, randn(rng, 4, 3), 2.0)
    assert info.type is DTypeError
    assert "input 2 (y) is float 2.0; compiled modules take Tensors" in str(info.value)


def test_example_inputs_with_symbolic_sizes_are_refused():
    with pytest.raises(ShapeError, match=r"(?s)example input 1 has the symbolic dimension N \(shape \[N, 3\]\).*"
                                         r"hint: give sizes"):
        fxkit.compile(model, example_inputs=[("N", 3), (4, 3)])


def test_example_input_count_is_checked():
    with pytest.raises(GraphError, match=r"takes 2 inputs \(x, y\), got 1 example inputs"):
        fxkit.compile(model, example_inputs=[(4, 3)])


def test_keys_of_tensors_and_of_specs_agree(rng):
    tensors = [randn(rng, 4, 3), fxkit.from_numpy(np.arange(5))]
    assert input_key(tensors) == spec_key(specs_of(tensors))
    assert spec_key(as_specs([(4, 3), ((5,), fxkit.int64)], "test")) == input_key(tensors)
    assert input_key([randn(rng, 3, 4)]) != input_key(tensors[:1])
