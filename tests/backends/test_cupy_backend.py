"""fxkit.compile(backend="cupy") on a GPU: zoo models, fused kernels, row kernels, dtypes, layouts and
random programs against eager mode, and the guards. The tests marked ``cuda`` need cupy and a GPU; the
kernels' source and their semantics on the CPU are tested in test_cuda_codegen.py."""
import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
from fxkit import nn, ops
from fxkit.errors import DeviceError, DTypeError, ShapeError
from fxkit.transforms.fused_op import FusedOp
from tests.backends.examples import chain
from tests.conftest import HAS_CUDA
from tests.transforms.model_paths import ZOO_SHAPES, assert_close, zoo_model, zoo_params
from tests.transforms.random_graphs import programs

cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU with cupy")
RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def on_gpu(array):
    return fxkit.from_numpy(array).to("cuda")


def kernel_calls(compiled):
    """The CudaKernelCall objects the last specialisation's code calls, by name."""
    forward = compiled._last.lowered.fn.__wrapped__  # the generated function, inside the device context
    return {name: value for name, value in forward.__globals__.items() if type(value).__name__ == "CudaKernelCall"}


def _scale(out):
    if isinstance(out, fxkit.Tensor):
        values = out.cpu().numpy()
        finite = values[np.isfinite(values)] if out.dtype.is_floating_point else np.zeros(0)
        return max(float(np.abs(finite).max(initial=0)), 1.0)
    return max([_scale(v) for v in out] + [1.0])


def to_cpu(value):
    if isinstance(value, fxkit.Tensor):
        return value.cpu()
    return type(value)(to_cpu(v) for v in value)


# -- without a GPU: the backend is there and refuses cpu values clearly ---------------------------------
def test_the_cupy_backend_is_registered():
    assert "cupy" in fxkit.backends.backend_names()


def test_cpu_inputs_are_refused_before_anything_compiles():
    compiled = fxkit.compile(chain, backend="cupy")
    with pytest.raises(DeviceError, match=r"input 1 \(x\) is on cpu, but the cupy backend runs on cuda"):
        compiled(fxkit.from_numpy(np.ones(3, np.float32)))
    assert compiled.stats.compilations == 0
    with pytest.raises(DeviceError, match=r"the cupy backend runs on cuda, but the value %x is on cpu; "
                                          r"move the model with .to\('cuda'\)"):
        fxkit.compile(chain, backend="cupy", example_inputs=[(3,)])


# -- on a GPU ------------------------------------------------------------------------------------------
@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_match_eager(name, rng):
    model, _ = zoo_model(name)
    gpu_model = copy.deepcopy(model).to("cuda")
    compiled = fxkit.compile(gpu_model, backend="cupy", example_inputs=[
        fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)).to("cuda") for s in ZOO_SHAPES[name]])
    assert compiled.kernel_sources(), "the cupy backend generated no kernel"
    for _ in range(2):  # fresh inputs, never the ones it was compiled for
        inputs = [rng.standard_normal(s).astype(np.float32) for s in ZOO_SHAPES[name]]
        expected = model(*map(fxkit.from_numpy, inputs))
        got = compiled(*map(on_gpu, inputs))
        assert_close(to_cpu(got), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
    assert compiled.compile_count == 1


@pytest.mark.cuda
@cuda
def test_the_seed_chain_is_one_kernel_and_a_new_shape_compiles_once(rng):
    compiled = fxkit.compile(chain, backend="cupy")
    small, large = ((rng.random(s) * 0.02 + 0.99).astype(np.float32) for s in ((5,), (1 << 20,)))
    for x in (small, small, large, large, small, large):
        got = compiled(on_gpu(x))
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), x.astype(np.float64) ** 1024, rtol=1e-4)
    assert compiled.stats.compilations == 2 and compiled.stats.cache_hits == 2
    assert [n.target.name for n in compiled.graph.nodes if n.op == "call"] == ["fused_0"]
    source = compiled.kernel_sources()["fused_0"]
    assert 'extern "C" __global__ void kernel(' in source and "const float mul_9 = mul_8 * mul_8;" in source
    assert list(kernel_calls(compiled)) == ["fused_0"]


class Rows(nn.Module):
    """Softmax, log_softmax and layer_norm rows, each with elementwise ops before and after."""

    def __init__(self, length, rng):
        super().__init__()
        self.length = length
        self.weight = nn.Parameter(fxkit.from_numpy(rng.standard_normal(length).astype(np.float32)))
        self.bias = nn.Parameter(fxkit.from_numpy(rng.standard_normal(length).astype(np.float32)))

    def forward(self, v, m):
        return (ops.softmax(v * 0.125 + m, dim=-1) * 2.0, ops.log_softmax(v - m, dim=-1),
                ops.gelu(ops.layer_norm(v, (self.length,), self.weight, self.bias) + 1.0))


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("length", [1, 37, 1000, 5000])
def test_row_kernels_match_eager(length, rng):
    x = rng.standard_normal((6, length)).astype(np.float32) * 3
    mask = rng.standard_normal((length,)).astype(np.float32)
    model = Rows(length, rng).eval()
    expected = model(fxkit.from_numpy(x), fxkit.from_numpy(mask))
    compiled = fxkit.compile(model.to("cuda"), backend="cupy")
    got = compiled(on_gpu(x), on_gpu(mask))
    assert_close(to_cpu(got), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
    fused = [n for n in compiled.graph.nodes if n.op == "call" and isinstance(n.target, FusedOp)]
    assert len(fused) == 3 and len(kernel_calls(compiled)) == 3  # each row op and its neighbours: one kernel


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64])
def test_dtypes_and_promotion_match_eager(dtype, rng):
    def mixed(x, y):
        return ops.where(x > y, x * 3 + y, ops.maximum(x, y) - 1), (x // 2 + y) * 0.5

    x = (rng.standard_normal((4, 33)) * 8).astype(dtype)
    y = (rng.standard_normal((33,)) * 8).astype(np.float32 if dtype == np.float16 else dtype)
    expected = mixed(fxkit.from_numpy(x), fxkit.from_numpy(y))
    got = fxkit.compile(mixed, backend="cupy")(on_gpu(x), on_gpu(y))
    tolerance = 2e-3 if dtype == np.float16 else 1e-6
    assert_close(to_cpu(got), expected, rtol=tolerance, atol=tolerance * _scale(expected))


@pytest.mark.cuda
@cuda
def test_non_contiguous_and_empty_inputs(rng):
    def f(x, b):
        return ops.tanh(x * 2.0 + b) - x

    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48,)).astype(np.float32)
    expected = f(fxkit.from_numpy(a), fxkit.from_numpy(b))
    compiled = fxkit.compile(f, backend="cupy")
    assert_close(compiled(on_gpu(a), on_gpu(b)).cpu(), expected, rtol=1e-6, atol=1e-6)
    strided = on_gpu(np.ascontiguousarray(a.T)).transpose(0, 1)  # the same values, transposed strides
    assert not strided._data.flags.c_contiguous
    assert_close(compiled(strided, on_gpu(b)).cpu(), expected, rtol=1e-6, atol=1e-6)  # kernel_strided
    assert compiled.stats.compilations == 1
    empty = np.zeros((0, 48), np.float32)
    assert compiled(on_gpu(empty), on_gpu(b)).shape == (0, 48)


@pytest.mark.cuda
@cuda
def test_guards_refuse_wrong_rank_dtype_and_device_before_running(rng):
    x = on_gpu(rng.standard_normal((4, 8)).astype(np.float32))
    compiled = fxkit.compile(chain, backend="cupy", example_inputs=[x])
    with pytest.raises(ShapeError, match="rank"):
        compiled(on_gpu(rng.standard_normal((4, 8, 2)).astype(np.float32)))
    with pytest.raises(DTypeError, match="float64"):
        compiled(on_gpu(rng.standard_normal((4, 8))))
    with pytest.raises(DeviceError, match="on cpu"):
        compiled(x.cpu())
    assert compiled.stats.compilations == 1


@pytest.mark.slow
@pytest.mark.cuda
@cuda
@RANDOM
@given(programs(kinds=("elementwise", "elementwise", "elementwise", "reduction", "view", "matmul")))
def test_random_programs_match_eager(program):
    module = program.module().to("cuda")
    compiled = fxkit.compile(module, backend="cupy")
    got = compiled(*[t.to("cuda") for t in program.inputs])
    expected = program.expected
    assert_close(to_cpu(got), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
