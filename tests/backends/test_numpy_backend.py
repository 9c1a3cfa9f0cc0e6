"""The numpy backend: straight-line code over raw arrays (ufuncs with ``out=`` where it can,
op implementations elsewhere), PyTorch's dtype promotion written out as casts, and
results equal to eager on random graphs, odd dtypes, 0-d, empty and non-contiguous inputs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.backends.numpy_backend import NumpyBackend
from fxkit.backends.specialize import Specialize
from fxkit.errors import DeviceError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.tensor import Tensor
from tests.backends.examples import chain, randn
from tests.transforms.model_paths import assert_close
from tests.transforms.random_graphs import dags

RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_chain_is_ten_ufunc_calls_into_one_buffer():
    code = fxkit.compile(chain, example_inputs=[(5,)]).code
    lines = ["def forward(x):", "    mul = np_multiply(x, x)"]
    lines += [f"    mul_{i} = np_multiply({p}, {p}, out={p})" for i, p in
              ((i, "mul" if i == 1 else f"mul_{i - 1}") for i in range(1, 10))]
    assert code == "\n".join(lines + ["    return mul_9", ""])


def test_lowering_gives_a_function_over_raw_arrays(rng):
    def f(x, w):
        return F.gelu(F.linear(x, w)), x.sum()

    specs = [TensorMeta((4, 3), fxkit.float32), TensorMeta((5, 3), fxkit.float32)]
    gm = Specialize(specs)(fxkit.symbolic_trace(f))
    lowered = NumpyBackend().lower(gm, specs)
    x, w = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    y, total = lowered.fn(x, w)
    assert type(y) is np.ndarray and type(total) is np.ndarray and total.shape == ()
    assert "Tensor" not in lowered.code and "ops." not in lowered.code
    assert "linear_impl(np, x, w)" in lowered.code and "gelu_impl(np, linear" in lowered.code
    assert lowered.kernels == {}
    assert lowered.line_nodes[2].name == "linear"


@pytest.mark.parametrize("dtypes", [
    ("int32", "float32"), ("int64", "float16"), ("bool", "int32"), ("float32", "float64"), ("uint8", "int8"),
])
def test_dtype_promotion_matches_pytorch(dtypes, rng):
    torch = pytest.importorskip("torch")

    def f(x, y):
        return (x + y) * 2, x * 1.5, ops.maximum(x, y), x < y

    a = (rng.random((3, 4)) * 10).astype(dtypes[0])
    b = (rng.random((4,)) * 10).astype(dtypes[1])
    compiled = fxkit.compile(f)
    out = compiled(fxkit.from_numpy(a), fxkit.from_numpy(b))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    expected = ((ta + tb) * 2, ta * 1.5, torch.maximum(ta, tb), ta < tb)
    for got, want in zip(out, expected):
        assert str(got.dtype.np) == str(want.numpy().dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-3)
    if dtypes[0] != dtypes[1]:
        assert ".astype(" in compiled.code


def test_zero_dim_results_are_arrays(rng):
    def f(x):
        mean = x.mean()
        return x - mean, mean * 2, ops.sum(x)

    x = randn(rng, 3, 4)
    centred, doubled, total = fxkit.compile(f)(x)
    assert doubled.shape == () and total.shape == () and isinstance(doubled.numpy(), np.ndarray)
    np.testing.assert_allclose(centred.numpy(), x.numpy() - x.numpy().mean(dtype=np.float64), rtol=1e-5, atol=1e-6)
    # A float32 sum of n terms is within about n·eps·sum|x| of the exact sum; relative to the sum
    # itself the error is unbounded when the terms nearly cancel, so the bound is absolute.
    magnitude = np.abs(x.numpy()).sum(dtype=np.float64)
    np.testing.assert_allclose(total.numpy(), x.numpy().sum(dtype=np.float64), rtol=0, atol=x.numpy().size * 1.2e-7 * magnitude)


def test_half_precision_runs_the_implementations(rng):
    def f(x):
        return ops.sigmoid(x) * x + 1

    x = randn(rng, 4, 5, dtype=np.float16)
    compiled = fxkit.compile(f)
    out = compiled(x)
    assert out.dtype == fxkit.float16 and "np_" not in compiled.code
    xd = x.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), xd / (1 + np.exp(-xd)) + 1, rtol=2e-3, atol=2e-3)


def test_non_contiguous_and_empty_inputs(rng):
    def f(x, y):
        return ops.exp(x) * y + ops.relu(y)

    a, b = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    compiled = fxkit.compile(f)
    out = compiled(fxkit.from_numpy(a.T), fxkit.from_numpy(b[:, ::1]))
    np.testing.assert_allclose(out.numpy(), np.exp(a.T) * b + np.maximum(b, 0), rtol=1e-6)
    empty = compiled(randn(rng, 0, 3), randn(rng, 0, 3))
    assert empty.shape == (0, 3)


def test_factories_casts_and_dtype_arguments(rng):
    def f(x):
        y = x.to(fxkit.float64) + fxkit.ones_like(x, dtype=fxkit.float64)
        return F.softmax(x, -1, dtype=fxkit.float64) + y, x.long()

    x = randn(rng, 3, 4)
    probs, as_long = fxkit.compile(f)(x)
    xd = x.numpy().astype(np.float64)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    assert probs.dtype == fxkit.float64 and as_long.dtype == fxkit.int64
    np.testing.assert_allclose(probs.numpy(), e / e.sum(-1, keepdims=True) + xd + 1, rtol=1e-12)
    np.testing.assert_array_equal(as_long.numpy(), x.numpy().astype(np.int64))


class _FakeCuda:
    type = "cuda"

    def __str__(self):
        return "cuda:0"


class _Scale(nn.Module):
    def forward(self, x):
        return x * self.scale


def test_buffers_on_another_device_are_refused(rng):
    model = _Scale()
    model.register_buffer("scale", Tensor._make(rng.standard_normal(3).astype(np.float32), _FakeCuda()))
    with pytest.raises(DeviceError, match="the numpy backend runs on cpu, but the parameter %scale is on cuda:0"):
        fxkit.compile(model, example_inputs=[(4, 3)])


@pytest.mark.slow
@RANDOM
@given(dags())
def test_random_graphs_match_eager(program):
    for model in (program.graph_module(), program.module()):
        compiled = fxkit.compile(model)
        assert_close(compiled(*program.inputs), program.expected, rtol=1e-6, atol=1e-6)
        assert compiled(*program.inputs) is not None and compiled.compile_count == 1
