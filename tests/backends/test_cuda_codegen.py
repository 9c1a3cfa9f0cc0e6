"""Generated CUDA kernels without a GPU: the source they print, nvcc compiling every op template, row
kernel and the kernels of random graphs and zoo models, and the same source compiled for the CPU
(`tests.backends.cuda_host`) computing what eager mode computes."""
import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

import fxkit
from fxkit import ops
from fxkit.backends.cuda_launch import CudaKernelCall
from fxkit.codegen.cuda_kernel import INT_INDEX_MAX, elementwise_kernel, unsupported
from fxkit.codegen.cuda_rows import row_kernel
from fxkit.graph import Graph
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op
from fxkit.transforms.fused_op import FusedOp
from tests.backends.cuda_host import CXX, NVCC, HostCompiler, HostCupyBackend, nvcc_check
from tests.backends.fused_cases import ELEMENTWISE_CASES, single_op_group, without_kernel
from tests.runtime.opcheck import to_fxkit
from tests.transforms.model_paths import ZOO_SHAPES, assert_close, zoo_model, zoo_params
from tests.transforms.random_graphs import programs

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")
needs_cxx = pytest.mark.skipif(CXX is None, reason="needs g++ to run kernels on the CPU")
RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return HostCompiler(str(tmp_path_factory.mktemp("cuda_host")))


def meta(array):
    return TensorMeta(array.shape, fxkit.runtime.dtypes.from_numpy(array.dtype))


def run_on_host(host, source, *args):
    return CudaKernelCall("k", source, host.load(source.source), np, 1)(*args)


def _chain_group(n=10):
    body = Graph()
    x = body.placeholder("x")
    for _ in range(n):
        x = body.call(ops.mul, (x, x))
    body.output(x)
    return FusedOp("fused_0", body)


def _group(build, *names):
    """A FusedOp whose body is ``build(*placeholders)``."""
    body = Graph()
    body.output(build(body, *[body.placeholder(n) for n in names]))
    return FusedOp("fused_0", body)


# -- the printed source ------------------------------------------------------------------------------
def test_the_seed_chain_is_one_float_loop_over_the_elements():
    source = elementwise_kernel(_chain_group(), [TensorMeta((16_000_000,), fxkit.float32)], ["x"])
    contiguous = source.source.split('extern "C" __global__ void kernel_strided')[0]
    assert source.header.startswith("// fused_0\n//   inputs: x0 = %x (float32[16000000])\n"
                                    "//   %mul = call[mul](%x, %x)\n")
    assert contiguous.startswith('extern "C" __global__ void kernel(float* __restrict__ out0, '
                                 'const float* __restrict__ x0) {\n')
    assert ("for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 16000000; i += blockDim.x * gridDim.x) {"
            in contiguous)
    assert "const float x0_1 = x0[i];" in contiguous and "const float mul_9 = mul_8 * mul_8;" in contiguous
    assert "out0[i] = mul_9;" in contiguous
    assert "double" not in source.source and "fx_" not in source.source  # no helper is called
    assert source.size == 16_000_000 and source.strided


def test_broadcast_operands_read_their_own_index():
    fused = _group(lambda g, x, b: g.call(ops.relu, (g.call(ops.add, (x, b)),)), "x", "b")
    source = elementwise_kernel(fused, [TensorMeta((8, 3, 16), fxkit.float32), TensorMeta((16,), fxkit.float32)])
    contiguous, strided = source.source.split("kernel_strided")
    assert "const int i1 = i % 16;" in contiguous and "x1[i1]" in contiguous and "x0[i]" in contiguous
    assert "long long x0_s0, long long x0_s1, long long x0_s2, long long x1_s0" in strided
    assert "x0[i0 * x0_s0 + i1 * x0_s1 + i2 * x0_s2]" in strided and "x1[i2 * x1_s0]" in strided
    assert "fx_maximum_f(add, 0.0f)" in source.source


def test_large_kernels_index_with_long_long():
    source = elementwise_kernel(_chain_group(2), [TensorMeta((INT_INDEX_MAX + 1,), fxkit.float32)])
    assert f"for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {INT_INDEX_MAX + 1}LL;" in (
        source.source)


def test_constants_take_the_compute_dtype():
    fused = _group(lambda g, x, n: g.call(ops.add, (g.call(ops.mul, (x, 0.5)), n), {"alpha": 3}), "x", "n")
    doubles = elementwise_kernel(fused, [TensorMeta((4,), fxkit.float64), TensorMeta((4,), fxkit.int64)]).source
    assert "x0_1 * 0.5;" in doubles and "(double)x1_1 * 3.0" in doubles and "f;" not in doubles
    integers = _group(lambda g, x: g.call(ops.mul, (g.call(ops.add, (x, 2)), 3)), "x")
    text = elementwise_kernel(integers, [TensorMeta((4,), fxkit.int64)]).source
    assert "const long long add = x0_1 + 2LL * 1LL;" in text and "const long long mul = add * 3LL;" in text


def test_half_values_are_rounded_after_every_op():
    fused = _group(lambda g, x: g.call(ops.exp, (g.call(ops.mul, (x, x)),)), "x")
    text = elementwise_kernel(fused, [TensorMeta((4, 5), fxkit.float16)]).source
    assert "const float x0_1 = fx_half_to_float(x0[i]);" in text
    assert "const float mul = fx_round_half(x0_1 * x0_1);" in text
    # NOTE: a local never takes the name of a C function it could hide (exp -> exp_1)
    assert "const float exp_1 = fx_round_half(expf(mul));" in text and "out0[i] = fx_float_to_half(exp_1);" in text
    assert "unsigned short* __restrict__ out0" in text


def test_groups_of_unsupported_values_are_refused_with_the_reason():
    assert unsupported([TensorMeta((2,), fxkit.float32), 1.5, True]) is None
    assert unsupported([TensorMeta(("N", 3), fxkit.float32)]) == "shape ('N', 3) is not concrete"
    if fxkit.runtime.dtypes.bfloat16 is not None:
        with pytest.raises(fxkit.LoweringError, match="fused_0: no CUDA kernel: CUDA kernels have no bfloat16"):
            elementwise_kernel(_chain_group(2), [TensorMeta((4,), fxkit.runtime.dtypes.bfloat16)])


# -- every elementwise template ------------------------------------------------------------------------


def _case_kernel(c, rng):
    args, kwargs = c.make(rng)
    fused, inputs = single_op_group(get_op(c.op), args, kwargs)
    if unsupported([meta(a) for a in inputs]) or without_kernel(get_op(c.op), args, kwargs):
        return args, kwargs, inputs, None
    return args, kwargs, inputs, elementwise_kernel(fused, [meta(a) for a in inputs])


@pytest.fixture(scope="module")
def template_kernels(host):
    """Every case's kernel, compiled for the CPU in one batch (later draws of a case reuse it)."""
    rng = np.random.default_rng(0)
    sources = [k.source for k in (_case_kernel(c, rng)[3] for c in ELEMENTWISE_CASES) if k is not None]
    host.compile(sources)
    return sources


@pytest.mark.slow
@needs_nvcc
def test_every_template_compiles_with_nvcc(template_kernels):
    nvcc_check(template_kernels)


def _strided(array):
    """The same values through a view with a stride of 2 in its last dimension."""
    if array.ndim == 0 or array.shape[-1] == 0:
        return array
    return np.repeat(array, 2, axis=-1)[..., ::2]


@needs_cxx
@pytest.mark.parametrize("c", ELEMENTWISE_CASES, ids=repr)
def test_every_template_on_the_cpu_matches_eager(c, rng, host, template_kernels):
    args, kwargs, inputs, source = _case_kernel(c, rng)
    if source is None:
        pytest.skip(without_kernel(get_op(c.op), args, kwargs)
                    or "CUDA kernels take no arrays of this dtype (the backend runs such groups with cupy)")
    op = get_op(c.op)
    eager = op(*to_fxkit(copy.deepcopy(args), "cpu"), **to_fxkit(copy.deepcopy(kwargs), "cpu"))
    with np.errstate(all="ignore"):
        got = run_on_host(host, source, *inputs)
    assert got.dtype == eager.dtype.np and got.shape == eager.shape
    if eager.dtype.is_floating_point:
        tolerance = 2e-3 if eager.dtype == fxkit.float16 else 2e-6
        np.testing.assert_allclose(got, eager.numpy(), rtol=max(c.rtol, tolerance), atol=max(c.atol, 1e-6),
                                   equal_nan=True, err_msg=source.text)
    else:
        np.testing.assert_array_equal(got, eager.numpy(), err_msg=source.text)
    views = [_strided(a) for a in inputs]
    if any(v is not a for v, a in zip(views, inputs)):  # kernel_strided, on the same values
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(run_on_host(host, source, *views), got, err_msg=source.text)


# -- helper semantics ------------------------------------------------------------------------------
@needs_cxx
def test_half_conversions_are_exact_and_round_to_nearest_even(host, rng):
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    identity = _group(lambda g, x: g.call(ops.neg, (g.call(ops.neg, (x,)),)), "x")
    got = run_on_host(host, elementwise_kernel(identity, [meta(every)]), every)
    np.testing.assert_array_equal(got.view(np.uint16)[~np.isnan(every)], every.view(np.uint16)[~np.isnan(every)])
    assert np.isnan(got[np.isnan(every)]).all()
    # products of halves round once from float32, as numpy's float16 multiply does (subnormals, overflow)
    a = rng.choice(every[np.isfinite(every)], 200_000)
    b = rng.choice(every[np.isfinite(every)], 200_000)
    product = _group(lambda g, x, y: g.call(ops.mul, (x, y)), "x", "y")
    got = run_on_host(host, elementwise_kernel(product, [meta(a), meta(b)]), a, b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, a * b)


@needs_cxx
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floor_divide_remainder_and_pow_follow_numpy_on_hard_values(dtype, host):
    values = np.array([7.5, -7.5, 3.0, -3.0, 0.0, -0.0, 1e-30, np.inf, -np.inf, np.nan, 2.0, -0.5], dtype)
    a, b = np.meshgrid(values, values)
    a, b = a.ravel().copy(), b.ravel().copy()
    for op, reference in ((ops.floor_divide, np.floor_divide), (ops.remainder, np.remainder)):
        fused = _group(lambda g, x, y: g.call(op, (x, y)), "x", "y")
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(run_on_host(host, elementwise_kernel(fused, [meta(a), meta(b)]), a, b),
                                          reference(a, b), err_msg=op.name)
    exponents = b
    power = _group(lambda g, x, y: g.call(ops.pow, (x, y)), "x", "y")
    with np.errstate(all="ignore"):
        got = run_on_host(host, elementwise_kernel(power, [meta(a), meta(exponents)]), a, exponents)
        np.testing.assert_allclose(got, np.power(a, exponents), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("op", [ops.floor_divide, ops.remainder, ops.pow])
def test_integer_division_and_power_get_no_cuda_kernel(dtype, op):
    # Eager mode raises on a zero divisor or a negative power; a kernel cannot, so the call runs the impl.
    ints = np.arange(1, 5, dtype=dtype)
    with pytest.raises(fxkit.LoweringError, match="no kernel template for integer results"):
        elementwise_kernel(_group(lambda g, x, y: g.call(op, (x, y)), "x", "y"), [meta(ints), meta(ints)])


# -- row kernels -----------------------------------------------------------------------------------
def _row_group(op, *args, prologue=True, epilogue=True, params=0, **kwargs):
    """``(x * 0.5 + mask) -> op -> * res``; ``params`` more inputs are appended to the op's arguments."""
    body = Graph()
    x, m, r = body.placeholder("x"), body.placeholder("mask"), body.placeholder("res")
    extra = tuple(body.placeholder(f"p{i}") for i in range(params))
    value = body.call(ops.add, (body.call(ops.mul, (x, 0.5)), m)) if prologue else x
    value = body.call(op, (value, *args, *extra), kwargs)
    if epilogue:
        value = body.call(ops.mul, (value, r))
    body.output(value)
    return FusedOp("fused_0", body)


def _softmax64(v, log):
    shifted = v - v.max(-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(-1, keepdims=True))
    return shifted - lse if log else np.exp(shifted - lse)


def _row_cases(rng):
    """``(source, inputs, expected)`` for softmax, log_softmax and layer_norm rows in both float types."""
    cases = []
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((3, 4, 37)).astype(dtype) * 4
        mask = rng.standard_normal((4, 37)).astype(dtype)
        res = rng.standard_normal((3, 4, 1)).astype(dtype)
        x64, mask64, res64 = (a.astype(np.float64) for a in (x, mask, res))
        for name in ("softmax", "log_softmax"):
            source = row_kernel(_row_group(get_op(name), dim=-1), [meta(x), meta(mask), meta(res)])
            cases.append((source, (x, mask, res), _softmax64(x64 * 0.5 + mask64, name == "log_softmax") * res64))
        x = rng.standard_normal((5, 3, 8)).astype(dtype) * 3 + 1
        w, b = rng.standard_normal((3, 8)).astype(dtype), rng.standard_normal((3, 8)).astype(dtype)
        mask, res = rng.standard_normal((3, 8)).astype(dtype), rng.standard_normal((5, 1, 1)).astype(dtype)
        source = row_kernel(_row_group(ops.layer_norm, (3, 8), params=2, eps=1e-5),
                            [meta(x), meta(mask), meta(res), meta(w), meta(b)])
        v = x.astype(np.float64) * 0.5 + mask
        mean = v.mean(axis=(1, 2), keepdims=True)
        expected = ((v - mean) / np.sqrt(v.var(axis=(1, 2), keepdims=True) + 1e-5) * w + b) * res
        cases.append((source, (x, mask, res, w, b), expected))
    return cases


@needs_nvcc
def test_row_kernels_compile_with_nvcc(rng):
    nvcc_check([source.source for source, _, _ in _row_cases(rng)])


@needs_cxx
def test_row_kernels_on_the_cpu_match_float64_references(host, rng):
    for source, inputs, expected in _row_cases(rng):
        rtol = 2e-6 if inputs[0].dtype == np.float32 else 1e-12
        np.testing.assert_allclose(run_on_host(host, source, *inputs), expected, rtol=rtol, atol=rtol,
                                   err_msg=source.text)


@needs_cxx
def test_rows_with_nan_inf_and_empty_rows(host, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[1, 2] = np.nan
    x[2, :] = -np.inf
    x[3, 0] = np.inf
    fused = _row_group(ops.softmax, dim=1, prologue=False, epilogue=False)
    ones = np.ones((1, 1), np.float32)
    got = run_on_host(host, row_kernel(fused, [meta(x), meta(ones), meta(ones)]), x, ones, ones)
    with np.errstate(invalid="ignore"):
        expected = ops.softmax(fxkit.from_numpy(x), dim=1).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, equal_nan=True)  # NaN exactly where eager has it
    empty = np.zeros((3, 0), np.float32)
    assert run_on_host(host, row_kernel(fused, [meta(empty), meta(ones), meta(ones)]), empty, ones, ones).shape == (
        3, 0)


def test_row_kernels_refuse_operands_split_across_row_dims():
    fused = _row_group(ops.layer_norm, (3, 8), epilogue=False)
    with pytest.raises(fxkit.LoweringError, match="full in some row dimensions and broadcast in others"):
        row_kernel(fused, [TensorMeta((2, 3, 8), fxkit.float32), TensorMeta((1, 8), fxkit.float32),
                           TensorMeta((1,), fxkit.float32)])


# -- whole graphs: the cupy backend's passes and code, kernels on the CPU -------------------------------
def _scale(out):
    """The largest magnitude of the floating tensors in ``out`` (any nesting), at least 1."""
    if isinstance(out, fxkit.Tensor):
        finite = out.numpy()[np.isfinite(out.numpy())] if out.dtype.is_floating_point else np.zeros(0)
        return max(float(np.abs(finite).max(initial=0)), 1.0)
    return max([_scale(v) for v in (out.values() if isinstance(out, dict) else out)] + [1.0])


@needs_cxx
@needs_nvcc
@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_with_cupy_kernels_on_the_cpu_match_eager(name, host, rng):
    model, _ = zoo_model(name)
    backend = HostCupyBackend(host)
    compiled = fxkit.compile(model, backend=backend, example_inputs=ZOO_SHAPES[name])
    assert compiled.kernel_sources().keys() == {n.target.name for n in compiled.graph.nodes
                                                if n.op == "call" and isinstance(n.target, FusedOp)}
    inputs = tuple(fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ZOO_SHAPES[name])
    expected = model(*inputs)
    assert_close(compiled(*inputs), expected, rtol=1e-5, atol=1e-5 * _scale(expected))


@pytest.mark.slow
@needs_cxx
@needs_nvcc
@RANDOM
@given(programs(kinds=("elementwise", "elementwise", "elementwise", "reduction", "view", "matmul")))
def test_random_programs_with_cupy_kernels_on_the_cpu_match_eager(host, program):
    backend = HostCupyBackend(host)
    compiled = fxkit.compile(program.graph_module(), backend=backend, example_inputs=program.inputs)
    event(f"{len(backend.sources)} kernels")
    expected = program.expected
    assert_close(compiled(*program.inputs), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
    # the same values through non-contiguous views: the same specialisation, kernel_strided
    views = [fxkit.from_numpy(_strided(t.numpy())) for t in program.inputs]
    assert_close(compiled(*views), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
    assert compiled.compile_count == 1
