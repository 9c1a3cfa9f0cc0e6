"""Generated numba kernels: the source they print, every op template they translate, the vectorised
math they call, row kernels, the on-disk cache, and random elementwise graphs against the interpreter."""
import copy
import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import ops
from fxkit.backends.numba_cache import load_kernel_module
from fxkit.backends.numba_launch import KernelCall
from fxkit.backends.numba_math import erf32, exp32, exp_nonpositive32, maximum, minimum, tanh32
from fxkit.codegen import numba_kernel
from fxkit.codegen.block import CodeBlock
from fxkit.codegen.numba_kernel import PARALLEL_MIN, PARALLEL_MIN_SHARED, PARALLEL_MIN_STREAMING, elementwise_kernel
from fxkit.codegen.numba_reduction import row_kernel
from fxkit.graph import Graph, GraphModule, Interpreter
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op
from fxkit.transforms.fused_op import FusedOp
from tests.backends.fused_cases import ELEMENTWISE_CASES, single_op_group, without_kernel
from tests.runtime.opcheck import to_fxkit

numba = pytest.importorskip("numba")
RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def meta(array):
    return TensorMeta(array.shape, fxkit.runtime.dtypes.from_numpy(array.dtype))


def run_kernel(source, *args):
    return KernelCall("k", source, load_kernel_module(source.source))(*args)


# -- the block builder ------------------------------------------------------------------------------
def test_code_block_indents_nested_blocks():
    block = CodeBlock()
    block.line("def f(n):")
    with block.indent():
        with block.indent("for i in range(n):"):
            block.line("pass")
        block.line("")
        block.line("return n")
    assert str(block) == "def f(n):\n    for i in range(n):\n        pass\n\n    return n\n"


def test_code_block_takes_one_line_at_a_time():
    with pytest.raises(ValueError, match="takes one line"):
        CodeBlock().line("a = 1\nb = 2")


# -- vectorisable scalar math -------------------------------------------------------------------------
@numba.njit
def _apply(f, x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = f(x[i])
    return out


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-8, 88.7, -87.0, -103.0, 89.5], np.float32)


@pytest.mark.parametrize("fn, reference", [(exp32, np.exp), (tanh32, np.tanh)], ids=["exp32", "tanh32"])
def test_float32_math_is_within_two_ulp(fn, reference):
    x = np.concatenate([np.linspace(-110, 95, 400_001, dtype=np.float32), SPECIALS])
    got = _apply(fn, x)
    with np.errstate(all="ignore"):
        exact = reference(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(rounded))
    assert np.array_equal(got[np.isinf(rounded)], rounded[np.isinf(rounded)])
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    ulp = np.spacing(np.abs(rounded[normal]))
    assert np.max(np.abs(got[normal] - exact[normal]) / ulp) <= 2.0
    tiny = np.isfinite(rounded) & ~normal
    assert np.max(np.abs(got[tiny] - exact[tiny]), initial=0) <= 2 * np.spacing(np.float32(0))


def test_softmax_exp_equals_exp32_where_it_applies():
    """Softmax's exp only sees ``x - max(x) <= 0`` (or NaN); there it must be exp32 bit for bit."""
    x = np.concatenate([np.linspace(-110, 0, 400_001, dtype=np.float32),
                        np.array([np.nan, -np.inf, -0.0, 0.0], np.float32)])
    np.testing.assert_array_equal(_apply(exp_nonpositive32, x), _apply(exp32, x))


def test_erf32_computes_what_eager_erf_computes():
    x = np.concatenate([np.linspace(-6, 6, 200_001, dtype=np.float32), SPECIALS])
    np.testing.assert_array_equal(_apply(erf32, x), fxkit.ops.erf(fxkit.from_numpy(x)).numpy())


@numba.njit
def _extrema(a, b):
    return maximum(a, b), minimum(a, b)


@pytest.mark.slow
def test_maximum_and_minimum_propagate_nan_from_either_side():
    for a, b in ((np.nan, 1.0), (1.0, np.nan)):
        assert all(np.isnan(v) for v in _extrema(a, b))
    assert _extrema(2.0, -3.0) == (2.0, -3.0)
    assert _extrema(np.int64(-4), np.int64(7)) == (7, -4)


# -- every elementwise template, translated ------------------------------------------------------------
_NUMBA_DTYPES = {"float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"}


@pytest.mark.slow
@pytest.mark.parametrize("c", ELEMENTWISE_CASES, ids=repr)
def test_every_template_compiles_to_what_eager_computes(c, rng):
    op = get_op(c.op)
    args, kwargs = c.make(rng)
    fused, inputs = single_op_group(op, args, kwargs)
    if any(a.dtype.name not in _NUMBA_DTYPES for a in inputs):
        pytest.skip("numba has no arrays of this dtype (the backend runs such groups with numpy)")
    if without_kernel(op, args, kwargs):
        pytest.skip(without_kernel(op, args, kwargs))
    eager = op(*to_fxkit(copy.deepcopy(args), "cpu"), **to_fxkit(copy.deepcopy(kwargs), "cpu"))
    source = elementwise_kernel(fused, [meta(a) for a in inputs])
    with np.errstate(all="ignore"):
        got = run_kernel(source, *inputs)
    assert got.dtype == eager.dtype.np and got.shape == eager.shape
    if eager.dtype.is_floating_point:
        np.testing.assert_allclose(got, eager.numpy(), rtol=max(c.rtol, 2e-6), atol=max(c.atol, 1e-6),
                                   equal_nan=True, err_msg=source.text)
    else:
        np.testing.assert_array_equal(got, eager.numpy(), err_msg=source.text)


# -- source structure ----------------------------------------------------------------------------------
def _chain_group(n=10):
    body = Graph()
    x = body.placeholder("x")
    for _ in range(n):
        x = body.call(ops.mul, (x, x))
    body.output(x)
    return FusedOp("fused_0", body)


def test_the_seed_chain_is_one_flat_loop_in_float32():
    source = elementwise_kernel(_chain_group(), [TensorMeta((4, 5), fxkit.float32)], ["x"])
    contiguous = source.source.split("def loops_strided")[0]
    loops = contiguous.split("def kernel(")[0]
    assert source.header.startswith("# fused_0\n#   inputs: x0 = %x\n#   %mul = call[mul](%x, %x)")
    assert "x0_v = x0.reshape((n0,))" in contiguous and loops.count("for ") == 1
    assert "mul_9 = np.float32(mul_8 * mul_8)" in loops and "float64" not in contiguous
    assert "prange" not in contiguous
    large = elementwise_kernel(_chain_group(), [TensorMeta((PARALLEL_MIN_STREAMING,), fxkit.float32)])
    flat = large.source.split("def loops_strided")[0]
    assert "def loops(" not in flat and "parallel=True" in flat  # the flat loop is the prange itself
    assert "for i0 in numba.prange(n0):" in flat and "out0_v[i0] = mul_9" in flat


def _unary_group(op, **kwargs):
    body = Graph()
    body.output(body.call(op, (body.placeholder("x"),), kwargs))
    return FusedOp("fused_0", body)


@pytest.mark.parametrize("op, dtype, slow", [(ops.relu, fxkit.float32, False), (ops.exp, fxkit.float32, False),
                                             (ops.gelu, fxkit.float32, True), (ops.log, fxkit.float32, True),
                                             (ops.exp, fxkit.float64, True)])
def test_only_a_kernel_calling_slow_functions_runs_on_the_pool_from_parallel_min(op, dtype, slow):
    # Streaming kernels (vectorised code) wait for PARALLEL_MIN_STREAMING: right after a BLAS call the
    # pool's worker waits for a core, while one core nearly saturates memory.
    for n, parallel in ((PARALLEL_MIN, slow), (PARALLEL_MIN_STREAMING, True), (PARALLEL_MIN - 1, False)):
        source = elementwise_kernel(_unary_group(op), [TensorMeta((n,), dtype)]).source
        assert ("parallel=True" in source) is parallel, (op.name, dtype.name, n)


@pytest.mark.parametrize("op, dtype, slow", [(ops.relu, fxkit.float32, False), (ops.gelu, fxkit.float32, True)])
def test_with_blas_on_the_pool_a_slow_kernel_goes_parallel_from_parallel_min_shared(op, dtype, slow):
    """When numpy's BLAS shares numba's threads they are awake after each product: slow kernels of
    PARALLEL_MIN_SHARED elements pay for the launch; streaming ones keep their threshold."""
    assert PARALLEL_MIN_SHARED < PARALLEL_MIN
    for n, parallel in ((PARALLEL_MIN_SHARED, slow), (PARALLEL_MIN_SHARED - 1, False), (PARALLEL_MIN, slow),
                        (PARALLEL_MIN_STREAMING, True)):
        source = elementwise_kernel(_unary_group(op), [TensorMeta((n,), dtype)], pool_shared=True).source
        assert ("parallel=True" in source) is parallel, (op.name, n)


def test_a_parallel_nest_runs_vectorisable_loops_on_slices():
    body = Graph()
    x, b = body.placeholder("x"), body.placeholder("b")
    body.output(body.call(ops.add, (x, b)))
    source = elementwise_kernel(FusedOp("fused_0", body), [TensorMeta((PARALLEL_MIN_STREAMING // 64, 64), fxkit.float32),
                                                           TensorMeta((64,), fxkit.float32)])
    contiguous = source.source.split("def loops_strided")[0]
    assert "def loops(out0, x0, x1):" in contiguous and "for task in numba.prange(" in contiguous
    assert "loops(out0_v[start:stop], x0_v[start:stop], x1_v)" in contiguous


def test_broadcast_operands_read_index_zero_and_shapes_stay_out_of_the_source():
    body = Graph()
    x, b = body.placeholder("x"), body.placeholder("b")
    body.output(body.call(ops.relu, (body.call(ops.add, (x, b)),)))
    fused = FusedOp("fused_0", body)
    source = elementwise_kernel(fused, [TensorMeta((8, 3, 16), fxkit.float32), TensorMeta((16,), fxkit.float32)])
    assert "n0 = out0.shape[0] * out0.shape[1]" in source.source
    assert "x1_1 = x1[0, i1]" in source.source  # the loops read the (rows, columns) views
    other = elementwise_kernel(fused, [TensorMeta((2, 5, 7), fxkit.float32), TensorMeta((7,), fxkit.float32)])
    assert other.source == source.source  # one compiled kernel serves both shapes


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "broadcast"])
def test_kernels_take_any_strides(layout, rng):
    body = Graph()
    x, y = body.placeholder("x"), body.placeholder("y")
    body.output(body.call(ops.sub, (body.call(ops.mul, (x, 3.0)), y)))
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    views = {"contiguous": a, "transposed": np.ascontiguousarray(a.T).T, "sliced": np.repeat(a, 2, axis=1)[:, ::2],
             "broadcast": np.broadcast_to(a[:1], a.shape)}
    view = views[layout]
    source = elementwise_kernel(FusedOp("fused_0", body), [meta(view), meta(b)])
    np.testing.assert_allclose(run_kernel(source, view, b), view.astype(np.float64) * 3 - b, rtol=1e-6, atol=1e-6)


# -- row kernels ----------------------------------------------------------------------------------------
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


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_rows_with_prologue_and_epilogue(name, dtype, rng):
    x = rng.standard_normal((3, 4, 37)).astype(dtype) * 4
    mask = rng.standard_normal((4, 37)).astype(dtype)
    res = rng.standard_normal((3, 4, 1)).astype(dtype)
    source = row_kernel(_row_group(get_op(name), dim=-1), [meta(x), meta(mask), meta(res)])
    got = run_kernel(source, x, mask, res)
    x64, mask64, res64 = (a.astype(np.float64) for a in (x, mask, res))
    expected = _softmax64(x64 * 0.5 + mask64, name == "log_softmax") * res64
    np.testing.assert_allclose(got, expected, rtol=2e-6 if dtype == np.float32 else 1e-12, atol=1e-6)


@pytest.mark.slow
def test_layer_norm_rows_over_two_trailing_dims(rng):
    x = rng.standard_normal((5, 3, 8)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    mask, res = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((5, 1, 1)).astype(np.float32)
    fused = _row_group(ops.layer_norm, (3, 8), params=2, eps=1e-5)
    source = row_kernel(fused, [meta(x), meta(mask), meta(res), meta(w), meta(b)])
    got = run_kernel(source, x, mask, res, w, b)
    v = x.astype(np.float64) * 0.5 + mask
    mean = v.mean(axis=(1, 2), keepdims=True)
    expected = ((v - mean) / np.sqrt(v.var(axis=(1, 2), keepdims=True) + 1e-5) * w + b) * res
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_rows_with_nan_inf_and_empty_rows(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[1, 2] = np.nan
    x[2, :] = -np.inf
    x[3, 0] = np.inf
    fused = _row_group(ops.softmax, dim=1, prologue=False, epilogue=False)
    ones = np.ones((1, 1), np.float32)
    source = row_kernel(fused, [meta(x), meta(ones), meta(ones)])
    got = run_kernel(source, x, ones, ones)
    with np.errstate(invalid="ignore"):
        expected = ops.softmax(fxkit.from_numpy(x), dim=1).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, equal_nan=True)  # NaN exactly where eager has it
    empty = np.zeros((3, 0), np.float32)
    assert run_kernel(row_kernel(fused, [meta(empty), meta(ones), meta(ones)]), empty, ones, ones).shape == (3, 0)


def test_row_kernels_refuse_operands_split_across_row_dims():
    fused = _row_group(ops.layer_norm, (3, 8), epilogue=False)
    with pytest.raises(fxkit.LoweringError, match="full in some row dimensions and broadcast in others"):
        row_kernel(fused, [TensorMeta((2, 3, 8), fxkit.float32), TensorMeta((1, 8), fxkit.float32),
                           TensorMeta((1,), fxkit.float32)])


# -- the on-disk cache ------------------------------------------------------------------------------------
_CACHE_SCRIPT = textwrap.dedent("""
    import fxkit
    from fxkit.backends.numba_cache import cache_dir

    def chain(x):
        for _ in range(7):
            x = x * x + 0.25
        return x

    compiled = fxkit.compile(chain, backend="numba", example_inputs=[((3, 11), fxkit.float64)])
    kernel = compiled._last.lowered.fn.__globals__["fused_0"]._contiguous
    print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()), cache_dir())
""")


@pytest.mark.slow
def test_a_second_process_loads_compiled_kernels_from_disk(tmp_path):
    env = dict(os.environ, FXKIT_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True, text=True,
                           check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
            for _ in range(2)]
    first, second = (r.stdout.split() for r in runs)
    assert first[:2] == ["0", "1"], runs[0].stdout + runs[0].stderr  # compiled and saved
    assert second[:2] == ["1", "0"], runs[1].stdout + runs[1].stderr  # loaded, not compiled
    assert first[2] == str(tmp_path / "numba")
    assert list((tmp_path / "numba").glob("kernel_*.py"))


# -- random elementwise graphs against the interpreter --------------------------------------------------
_DTYPES = (np.float32, np.float32, np.float32, np.float64, np.int32, np.int64)
_BINARY = (ops.add, ops.sub, ops.mul, ops.maximum, ops.minimum)
_UNARY = (ops.neg, ops.abs, ops.tanh, ops.sigmoid, ops.relu, ops.gelu, ops.erf, ops.sin, ops.exp)


@st.composite
def elementwise_graphs(draw):
    """``(GraphModule, inputs)``: elementwise ops over inputs of broadcasting shapes (sizes 0 and 1
    included), mixed dtypes and any layout (transposed, sliced, zero-stride broadcast views)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = tuple(draw(st.lists(st.sampled_from([3, 2, 5, 1, 0]), min_size=1, max_size=3)))
    inputs = []
    for _ in range(draw(st.integers(1, 3))):
        keep = len(shape) - draw(st.integers(0, len(shape)))
        dims = tuple(1 if draw(st.booleans()) else d for d in shape[len(shape) - keep:])
        dtype = draw(st.sampled_from(_DTYPES))
        data = np.asarray(rng.uniform(-2, 2, dims) * (4 if dtype in (np.int32, np.int64) else 1)).astype(dtype)
        layout = draw(st.sampled_from(("contiguous", "transposed", "sliced", "broadcast")))
        if layout == "transposed" and data.ndim >= 2:
            data = np.ascontiguousarray(data.T).T
        elif layout == "sliced" and data.ndim >= 1:
            data = np.repeat(data, 2, axis=-1)[..., ::2]
        elif layout == "broadcast" and data.ndim >= 1 and data.shape[0] > 0:
            data = np.broadcast_to(data[:1], data.shape)
        inputs.append(fxkit.from_numpy(data))
    graph = Graph()
    values = [graph.placeholder(f"x{i}") for i in range(len(inputs))]
    floats = [v for v, t in zip(values, inputs) if t.dtype.is_floating_point] or [
        graph.call(ops.mul, (values[0], 0.5))]
    steps = draw(st.integers(2, 7))
    for _ in range(steps):
        form = draw(st.sampled_from(("unary", "binary", "binary", "scalar", "select", "clamp")))
        x = floats[-1] if draw(st.booleans()) else draw(st.sampled_from(floats))
        if form == "unary":
            op = draw(st.sampled_from(_UNARY))
            x = graph.call(ops.tanh, (x,)) if op is ops.exp else x  # keeps exp's result finite
            new = graph.call(op, (x,))
        elif form == "binary":
            new = graph.call(draw(st.sampled_from(_BINARY)), (x, draw(st.sampled_from(values + floats))))
        elif form == "scalar":
            new = graph.call(draw(st.sampled_from(_BINARY)), (x, draw(st.sampled_from([2, -1.5, 0.25]))))
        elif form == "select":
            condition = graph.call(draw(st.sampled_from((ops.gt, ops.le))), (x, draw(st.sampled_from(values))))
            new = graph.call(ops.where, (condition, x, draw(st.sampled_from(values + [1.0]))))
        else:
            new = graph.call(ops.clamp, (x,), {"min": -0.5, "max": draw(st.sampled_from([0.75, None]))})
        floats.append(new)
    made = floats[len(floats) - steps:]
    outputs = [made[-1]] + draw(st.lists(st.sampled_from(made[:-1]), max_size=1)) if len(made) > 1 else made
    graph.output(tuple(outputs) if len(outputs) > 1 else outputs[0])
    return GraphModule({}, graph), inputs


def assert_matches(got, expected):
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        e = e.numpy()
        if e.dtype.kind == "f":
            rtol = 1e-5 if e.dtype == np.float32 else 1e-12
            scale = float(np.max(np.abs(e), initial=1.0)) if np.isfinite(e).all() else 1.0
            np.testing.assert_allclose(g.numpy(), e, rtol=rtol, atol=rtol * scale, equal_nan=True)
        else:
            np.testing.assert_array_equal(g.numpy(), e)


@pytest.mark.slow
@RANDOM
@given(elementwise_graphs())
def test_random_elementwise_graphs_match_the_interpreter(case):
    gm, inputs = case
    expected = Interpreter(gm).run(*inputs)
    compiled = fxkit.compile(gm, backend="numba")
    assert_matches(compiled(*inputs), expected)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elementwise_graphs())
def test_random_elementwise_graphs_match_the_interpreter_on_the_thread_pool(case):
    # Every kernel parallel (flat prange loops and tasks over nests), on small inputs.
    gm, inputs = case
    expected = Interpreter(gm).run(*inputs)
    with mock.patch.multiple(numba_kernel, PARALLEL_MIN=1, PARALLEL_MIN_STREAMING=1):
        compiled = fxkit.compile(gm, backend="numba")
        got = compiled(*inputs)
    assert_matches(got, expected)


@pytest.mark.parametrize("op, kwargs", [(ops.floor_divide, {}), (ops.remainder, {}), (ops.pow, {}),
                                        (ops.div, {"rounding_mode": "trunc"}), (ops.div, {"rounding_mode": "floor"})])
def test_integer_ops_eager_checks_get_no_kernel(op, kwargs):
    # A kernel cannot raise on a zero divisor or a negative power as eager mode does: it is refused.
    ints = np.arange(1, 5, dtype=np.int32)
    fused, inputs = single_op_group(op, (ints, ints), kwargs)
    with pytest.raises(fxkit.LoweringError, match="no kernel template for integer results"):
        elementwise_kernel(fused, [meta(a) for a in inputs])
    floats = ints.astype(np.float32)
    fused, inputs = single_op_group(op, (floats, floats), kwargs)
    assert run_kernel(elementwise_kernel(fused, [meta(a) for a in inputs]), *inputs).dtype == np.float32
