"""fxkit.compile(backend="numba"): zoo models match eager, what fuses into one kernel, guards,
recompilation, the output-buffer contract, and random programs against eager."""
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
from fxkit import nn, ops
from fxkit.backends import cost_model
from fxkit.backends.numba_launch import KernelCall
from fxkit.codegen import numba_kernel
from fxkit.codegen.numba_kernel import PARALLEL_MIN_STREAMING
from fxkit.errors import DTypeError, ShapeError
from fxkit.transforms.fused_op import FusedOp
from tests.backends.examples import chain, randn
from tests.transforms.model_paths import ZOO_SHAPES, assert_close, zoo_model, zoo_params
from tests.transforms.random_graphs import programs

pytest.importorskip("numba")
RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def kernel_calls(compiled):
    """The KernelCall objects the last specialisation's generated code calls, by name."""
    return {name: value for name, value in compiled._last.lowered.fn.__globals__.items()
            if isinstance(value, KernelCall)}


def called_ops(compiled):
    return [n.target.name for n in compiled.graph.nodes if n.op == "call"]


def fused_bodies(compiled):
    """The ops of each fused group of the compiled graph, in graph order."""
    return [[m.target.name for m in n.target.graph.nodes if m.op == "call"]
            for n in compiled.graph.find_nodes(op="call") if isinstance(n.target, FusedOp)]


def _scale(out):
    tensors = [out] if isinstance(out, fxkit.Tensor) else list(out)
    return max(float(np.abs(t.numpy()).max()) for t in tensors)


@pytest.mark.slow  # numba compiles each model's kernels (seconds, the first time)
@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_match_eager(name, rng):
    model, _ = zoo_model(name)
    compiled = fxkit.compile(model, backend="numba", example_inputs=ZOO_SHAPES[name])
    # NOTE: the cost model may run ReLU tails as numpy's in-place ufuncs; something of the numba backend's
    # own (a kernel, a conv or linear rule) must run
    assert any(not d.choice.startswith("numpy") for d in compiled._last.lowered.decisions), compiled.explain()
    for _ in range(2):  # fresh inputs, never the ones it was compiled for
        inputs = tuple(randn(rng, *s) for s in ZOO_SHAPES[name])
        expected = model(*inputs)
        assert_close(compiled(*inputs), expected, rtol=1e-5, atol=1e-5 * _scale(expected))
    assert compiled.compile_count == 1


@pytest.mark.slow
def test_a_new_shape_compiles_once_then_hits_the_cache(rng):
    compiled = fxkit.compile(chain, backend="numba")
    small, large = (fxkit.from_numpy((rng.random(s) * 0.02 + 0.99).astype(np.float32)) for s in ((4, 3), (8, 3)))
    for x in (small, small, large, large, small, large):
        np.testing.assert_allclose(compiled(x).numpy(), x.numpy().astype(np.float64) ** 1024, rtol=1e-4)
    assert compiled.stats.compilations == 2
    assert compiled.stats.cache_hits == 2


@pytest.mark.slow
def test_the_seed_chain_is_one_kernel_in_both_size_classes(rng):
    for n in (5, PARALLEL_MIN_STREAMING):  # serial, and parallel over the thread pool
        x = fxkit.from_numpy((rng.random(n) * 0.02 + 0.99).astype(np.float32))
        compiled = fxkit.compile(chain, backend="numba", example_inputs=[x])
        assert called_ops(compiled) == ["fused_0"]
        assert compiled.code.strip().splitlines()[1].strip() == "mul_9 = fused_0(x)"
        np.testing.assert_allclose(compiled(x).numpy(), x.numpy().astype(np.float64) ** 1024, rtol=1e-4)
    assert "numba.prange" in compiled.kernel_sources()["fused_0"]


def test_an_output_beside_an_empty_loop_is_still_computed():
    # The group's loops run over (3, 0): no iteration would write the 0-d output.
    def f(x, y):
        n = -x
        return -n, ops.where(n > x, n, y)

    x, y = fxkit.from_numpy(np.array(0.5, np.float32)), fxkit.from_numpy(np.empty((3, 0), np.float32))
    got = fxkit.compile(f, backend="numba", example_inputs=[x, y])(x, y)
    assert got[0].shape == () and float(got[0].numpy()) == 0.5
    assert got[1].shape == (3, 0)


@pytest.mark.slow
def test_a_parallel_flat_kernel_reads_every_operand_kind(rng):
    # Two outputs, an int32 array, a size-1 tensor and a Python scalar in one flat prange loop.
    def f(x, k, s):
        y = ops.tanh(x * k + s) - 0.5
        return y, ops.exp(y) * x

    n = PARALLEL_MIN_STREAMING + 3
    x = randn(rng, n)
    k = fxkit.from_numpy(rng.integers(-3, 4, n).astype(np.int32))
    s = randn(rng, 1)
    compiled = fxkit.compile(f, backend="numba", example_inputs=[x, k, s])
    assert "for i0 in numba.prange(n0):" in compiled.kernel_sources()["fused_0"]
    got = compiled(x, k, s)
    x64, k64, s64 = (a.numpy().astype(np.float64) for a in (x, k, s))
    y = np.tanh(x64 * k64 + s64) - 0.5
    np.testing.assert_allclose(got[0].numpy(), y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), np.exp(y) * x64, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_with_its_neighbours_is_one_kernel(name, rng):
    def attention(q, k, mask, res):
        scores = q @ k.transpose(-2, -1) * 0.125 + mask
        return getattr(ops, name)(scores, dim=-1) * res

    args = (randn(rng, 2, 4, 8, 16), randn(rng, 2, 4, 8, 16), randn(rng, 1, 1, 8, 8), randn(rng, 2, 4, 8, 1))
    compiled = fxkit.compile(attention, backend="numba")
    got = compiled(*args)
    assert called_ops(compiled) == ["transpose", "matmul", "fused_0"]
    assert fused_bodies(compiled) == [["mul", "add", name, "mul"]]
    q, k, mask, res = (a.numpy().astype(np.float64) for a in args)
    scores = q @ k.transpose(0, 1, 3, 2) * 0.125 + mask
    shifted = scores - scores.max(-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected = (shifted - lse if name == "log_softmax" else np.exp(shifted - lse)) * res
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_layer_norm_and_the_gelu_tail_are_one_kernel_each(rng):
    model = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
    x = randn(rng, 4, 10, 64)
    compiled = fxkit.compile(model, backend="numba")
    got = compiled(x)
    assert fused_bodies(compiled) == [["layer_norm"], ["add", "gelu"]]
    assert [op for op in called_ops(compiled) if not op.startswith("fused")] == ["linear", "linear"]
    assert len(compiled.kernel_sources()) == 2
    w = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    v = x.numpy().astype(np.float64)
    v = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) * w["0.weight"] + w["0.bias"]
    v = v @ w["1.weight"].T + w["1.bias"]
    v = 0.5 * v * (1 + np.vectorize(math.erf)(v / np.sqrt(2)))
    np.testing.assert_allclose(got.numpy(), v @ w["3.weight"].T + w["3.bias"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_row_groups_leave_shared_producers_and_impure_neighbours_alone(rng):
    def f(x):
        y = x + 1.0
        s = ops.softmax(y, dim=-1)
        y[0] = 0.0  # setitem: impure, and a second user of y
        return s * 2.0, y

    x = randn(rng, 3, 7)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cost_model, "NUMBA_CALL_US", 0.0)  # every group keeps its kernel: grouping is checked here
        compiled = fxkit.compile(f, backend="numba")
        got = compiled(x)  # compiles here, for x's sizes
    # Lone elementwise ops are kernels too; neither crosses the setitem into the softmax kernel.
    assert fused_bodies(compiled) == [["add"], ["softmax"], ["mul"]]
    assert called_ops(compiled) == ["fused_0", "fused_2", "setitem", "fused_1"]
    expected = f(fxkit.from_numpy(x.numpy().copy()))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6)


@pytest.mark.slow
def test_splitting_the_bias_off_linear_keeps_results_bit_identical(rng):
    # NOTE: GELU, not a cheap activation: numpy's in-place ufuncs would win a ReLU or tanh tail over 160
    # elements, and the bias would rejoin the linear (rejoin_linear_biases)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU()).eval()
    x = randn(rng, 5, 16)
    compiled = fxkit.compile(model, backend="numba")
    got = compiled(x)
    assert fused_bodies(compiled) == [["add", "gelu"]]
    w, b = model[0].weight.numpy(), model[0].bias.numpy()
    product = x.numpy() @ w.T
    product += b
    exact = product.astype(np.float64)
    expected = 0.5 * exact * (1.0 + np.vectorize(math.erf)(exact / math.sqrt(2.0)))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_the_lstm_cell_tail_is_at_most_two_kernels(rng):
    cell, _ = zoo_model("lstm_cell")
    compiled = fxkit.compile(cell, backend="numba", example_inputs=ZOO_SHAPES["lstm_cell"])
    assert len(compiled.kernel_sources()) <= 2
    source = "\n".join(compiled.kernel_sources().values())
    assert "exp32" in source and "tanh32" in source  # the float32 math that vectorises


def test_guards_reject_wrong_inputs_before_any_kernel_runs(rng):
    compiled = fxkit.compile(chain, backend="numba", example_inputs=[(4, 3)])
    calls = kernel_calls(compiled)
    with pytest.raises(ShapeError, match=r"input 1 \(x\) is f32\[12\] on cpu, compiled for f32\[4, 3\] on cpu: "
                                         r"rank 1 instead of 2"):
        compiled(randn(rng, 12))
    with pytest.raises(DTypeError, match="dtype float64 instead of float32"):
        compiled(randn(rng, 4, 3, dtype=np.float64))
    assert all(not pool for call in calls.values() for pool in call._pools), "a kernel ran"


def test_outputs_a_caller_keeps_are_never_overwritten(rng):
    compiled = fxkit.compile(lambda x: ops.relu(x * 2.0 + 1.0), backend="numba", example_inputs=[(256,)])
    first_in, second_in = randn(rng, 256), randn(rng, 256)
    first = compiled(first_in)
    kept = first.numpy().copy()
    second = compiled(second_in)
    assert not np.shares_memory(first.numpy(), second.numpy())
    np.testing.assert_array_equal(first.numpy(), kept)
    view = second.numpy()[:10]
    del second
    third = compiled(first_in)
    assert not np.shares_memory(view, third.numpy())  # a view keeps its buffer taken
    del first, third, view
    addresses = {compiled(first_in).numpy().ctypes.data for _ in range(4)}
    assert len(addresses) == 1  # results dropped at once give their memory back


@pytest.mark.slow
def test_non_contiguous_inputs_use_the_strided_kernel(rng):
    compiled = fxkit.compile(lambda x, y: ops.tanh(x) * y + x, backend="numba")
    x = fxkit.from_numpy(rng.standard_normal((16, 8)).astype(np.float32).T)
    y = fxkit.from_numpy(rng.standard_normal((8, 32)).astype(np.float32)[:, ::2])
    got = compiled(x, y)
    expected = np.tanh(x.numpy().astype(np.float64)) * y.numpy() + x.numpy()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    (call,) = kernel_calls(compiled).values()
    assert call.compiled_signatures()["kernel_strided"]


@pytest.mark.slow
def test_a_parallel_strided_kernel_reads_a_0d_tensor(rng):
    compiled = fxkit.compile(lambda x, s: ops.tanh(x) * s + s, backend="numba")
    x = fxkit.from_numpy(rng.standard_normal((PARALLEL_MIN_STREAMING // 512, 512)).astype(np.float32).T)
    s = fxkit.from_numpy(np.array(1.5, np.float32))
    got = compiled(x, s)
    np.testing.assert_allclose(got.numpy(), np.tanh(x.numpy().astype(np.float64)) * 1.5 + 1.5, rtol=1e-5, atol=1e-6)
    (call,) = kernel_calls(compiled).values()
    assert call.compiled_signatures()["kernel_strided"]


@pytest.mark.slow
@pytest.mark.parametrize("axes", [(1, 0, 2), (2, 0, 1)])
def test_inputs_permuted_alike_run_the_contiguous_kernel_in_their_memory_order(rng, axes):
    compiled = fxkit.compile(lambda x, y: ops.tanh(x) * y - 1.0, backend="numba")
    a, b = (rng.standard_normal((4, 5, 6)).astype(np.float32) for _ in range(2))
    x, y = fxkit.from_numpy(a.transpose(axes)), fxkit.from_numpy(b.transpose(axes))
    got = compiled(x, y)
    expected = np.tanh(a.astype(np.float64)).transpose(axes) * b.transpose(axes) - 1.0
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert got.numpy().strides == x.numpy().strides  # laid out like its inputs, as numpy's ufuncs do
    (call,) = kernel_calls(compiled).values()
    assert call.compiled_signatures()["kernel_strided"] == []
    # One input permuted and one not share no memory order (the strided kernel or copies run).
    mixed = compiled(x, fxkit.from_numpy(np.ascontiguousarray(b.transpose(axes))))
    np.testing.assert_allclose(mixed.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_kept_permuted_result_is_never_overwritten(rng):
    compiled = fxkit.compile(lambda x: x * 2.0 + 1.0, backend="numba")
    a = rng.standard_normal((3, 7)).astype(np.float32)
    first = compiled(fxkit.from_numpy(a.T))
    second = compiled(fxkit.from_numpy((a + 1).T))
    np.testing.assert_allclose(first.numpy(), a.T * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), (a + 1).T * 2.0 + 1.0, rtol=1e-6)


@pytest.mark.slow
def test_views_with_contiguous_rows_are_copied_for_the_vectorised_kernel(rng):
    # An LSTM cell's gates: column blocks of one contiguous (rows, 4 * hidden) array.
    compiled = fxkit.compile(lambda i, g: ops.sigmoid(i) * ops.tanh(g), backend="numba")
    gates = rng.standard_normal((6, 4 * 5)).astype(np.float32)
    i, g = fxkit.from_numpy(gates[:, :5]), fxkit.from_numpy(gates[:, 10:15])
    assert not i.numpy().flags.c_contiguous
    got = compiled(i, g)
    i64, g64 = gates[:, :5].astype(np.float64), gates[:, 10:15].astype(np.float64)
    np.testing.assert_allclose(got.numpy(), np.tanh(g64) / (1 + np.exp(-i64)), rtol=1e-5, atol=1e-6)
    (call,) = kernel_calls(compiled).values()
    assert call.compiled_signatures() == {"kernel": call.compiled_signatures()["kernel"], "kernel_strided": []}


def test_row_kernels_copy_non_contiguous_inputs(rng):
    compiled = fxkit.compile(lambda x: ops.log_softmax(x, dim=-1), backend="numba")
    x = fxkit.from_numpy(rng.standard_normal((9, 6)).astype(np.float32).T)
    v = x.numpy().astype(np.float64)
    shifted = v - v.max(-1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert fused_bodies(compiled) == [["log_softmax"]]


def test_groups_numba_cannot_run_fall_back_to_numpy(rng):
    compiled = fxkit.compile(lambda x: ops.sigmoid(x) * x + 1.0, backend="numba")
    x = randn(rng, 6, 5, dtype=np.float16)
    got = compiled(x)
    assert called_ops(compiled) == ["fused_0"] and compiled.kernel_sources() == {}
    expected = (lambda v: ops.sigmoid(v) * v + 1.0)(x)
    assert got.dtype == fxkit.float16
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.slow
@RANDOM
@given(programs(kinds=("elementwise", "reduction"), max_steps=10))
def test_random_programs_match_eager(program):
    compiled = fxkit.compile(program.module(), backend="numba")
    got = compiled(*program.inputs)
    expected = program.expected
    assert_close(got, expected, rtol=1e-5, atol=1e-5 * max(_scale(expected), 1.0))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(kinds=("elementwise", "reduction"), max_steps=10))
def test_random_programs_match_eager_on_the_thread_pool(program):
    # Every kernel parallel: flat prange loops, tasks over nests and over rows.
    with mock.patch.multiple(numba_kernel, PARALLEL_MIN=1, PARALLEL_MIN_STREAMING=1):
        compiled = fxkit.compile(program.module(), backend="numba")
        got = compiled(*program.inputs)
    expected = program.expected
    assert_close(got, expected, rtol=1e-5, atol=1e-5 * max(_scale(expected), 1.0))
