"""``fxkit.compile(model, backend="onnxruntime")``: partitions on onnxruntime sessions, the rest on numpy.

Outputs are compared with eager fxkit (float32 within 1e-4 of the largest
value, the acceptance bound of the delegate issue); quantized graphs with the
QDQ model onnxruntime runs directly and with fxkit's integer kernels.
"""
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.errors import DTypeError, LoweringError, ShapeError  # noqa: E402
from tests.transforms.model_paths import ZOO_SHAPES, assert_close, zoo_model, zoo_params  # noqa: E402

TOLERANCE = 1e-4


def partitions(compiled):
    return [n.target for n in compiled.graph.nodes if n.op == "call" and "partition" in n.meta]


def scale(out):
    tensors = [out] if isinstance(out, fxkit.Tensor) else list(out)
    return max(float(np.abs(t.numpy()).max()) for t in tensors)


def assert_matches(actual, expected):
    assert_close(actual, expected, rtol=TOLERANCE, atol=TOLERANCE * scale(expected))


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_match_eager_in_one_session(name):
    model, inputs = zoo_model(name)
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=inputs)
    assert_matches(compiled(*inputs), model(*inputs))
    assert partitions(compiled) == ["supported_0"], "every zoo op has an ONNX rule: one partition"
    assert compiled.compile_count == 1


def test_models_imported_from_onnx_run_on_the_delegate():
    model, inputs = zoo_model("lenet")
    imported = fxkit.from_onnx(fxkit.onnx.export(model, inputs))
    compiled = fxkit.compile(imported, backend="onnxruntime", example_inputs=inputs)
    assert_matches(compiled(*inputs), model(*inputs))
    assert partitions(compiled) == ["supported_0"]


@fxkit.wrap
def python_step(x):
    """A Python function in the middle of the model: onnxruntime cannot run it."""
    return x * 0.5 + 1.0


class Sandwich(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        return self.b(python_step(self.a(x).relu())).softmax(-1)


def test_a_wrapped_function_in_the_middle_splits_the_graph_in_two():
    model = Sandwich().eval()
    x = fxkit.randn(3, 8)
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[x])
    assert partitions(compiled) == ["supported_0", "supported_1"]
    calls = [n.target for n in compiled.graph.nodes if n.op == "call"]
    assert calls == ["supported_0", python_step, "supported_1"]
    assert_matches(compiled(x), model(x))
    assert set(compiled.kernel_sources()) == {"supported_0", "supported_1"}


def test_numba_runs_the_rest_when_asked():
    pytest.importorskip("numba")
    model = Sandwich().eval()
    x = fxkit.randn(3, 8)
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[x], fallback="numba")
    assert_matches(compiled(x), model(x))


def test_one_session_serves_every_batch_size():
    model, _ = zoo_model("mlp")
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[(2, 784)])
    for n in (2, 7, 1):
        x = fxkit.randn(n, 784)
        assert_matches(compiled(x), model(x))
    assert compiled.compile_count == 3, "each size is its own specialisation, as with the other backends"
    (runner,) = compiled.backend.runners.values()
    assert runner.session.get_inputs()[0].shape == ["N", 784]


class Picky(nn.Module):
    """Reads the batch size as a number: no batch-free graph exists, one session per size."""

    def forward(self, x):
        return x.relu() * 2.0 if x.shape[0] > 2 else x.tanh()


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.picky = Picky()

    def forward(self, x):
        return self.picky(x) + 1.0


class PickyIsALeaf(fxkit.Tracer):
    def is_leaf_module(self, module, qualname):
        return isinstance(module, Picky) or super().is_leaf_module(module, qualname)


def test_a_model_needing_the_concrete_batch_size_gets_a_session_per_size():
    model = Outer()
    gm = fxkit.GraphModule(model, PickyIsALeaf().trace(model))
    compiled = fxkit.compile(gm, backend="onnxruntime")
    for n in (1, 4):
        x = fxkit.randn(n, 5)
        assert_matches(compiled(x), model(x))
    assert len(compiled.backend.runners) == 2


def test_batch_arithmetic_stays_symbolic():
    def halves(x):
        return x.reshape(x.shape[0] // 2, -1).relu()

    compiled = fxkit.compile(halves, backend="onnxruntime")
    for n in (2, 6):
        x = fxkit.randn(n, 3)
        assert_matches(compiled(x), halves(x))
    assert len(compiled.backend.runners) == 1


@pytest.mark.parametrize("name", ["lenet", "mlp"])
def test_quantized_graphs_run_on_int8_kernels(name, tmp_path):
    from fxkit.transforms.quantize import calibrate, convert, prepare

    model, inputs = zoo_model(name)
    rng = np.random.default_rng(5)
    batches = [tuple(fxkit.from_numpy(rng.standard_normal(x.shape).astype(np.float32)) for x in inputs)
               for _ in range(3)]
    prepared = prepare(fxkit.symbolic_trace(model))
    calibrate(prepared, batches, progress=False)
    quantized = convert(prepared, report=False)
    options = ort.SessionOptions()
    optimized = tmp_path / "optimized.onnx"
    options.optimized_model_filepath = str(optimized)
    compiled = fxkit.compile(quantized, backend="onnxruntime", example_inputs=batches[0], session_options=options)
    actual = compiled(*batches[1]).numpy()
    proto = fxkit.onnx.export(quantized, batches[1])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    direct = session.run(None, {session.get_inputs()[0].name: batches[1][0].numpy()})[0]
    np.testing.assert_array_equal(actual, direct)
    step = [n for n in quantized.graph.nodes if n.is_op("dequantize_affine")][-1].args[1]
    expected = quantized(*batches[1]).numpy()
    assert np.max(np.abs(actual - expected)) <= 4 * step  # ties round differently (see onnx_rules_quantized)
    kernels = {n.op_type for n in onnx.load(str(optimized)).graph.node}
    assert kernels & {"QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger"}, kernels


# -- guards behave as the other backends' -------------------------------------------------------
_RUNS = []


@fxkit.wrap
def count_run(x):
    """Runs only inside the compiled code: counts the calls that got past the guard."""
    _RUNS.append(1)
    return x


def guarded(x):
    return count_run(x * 2.0 + 1.0).exp()


def test_another_dtype_or_rank_is_refused_before_running():
    compiled = fxkit.compile(guarded, backend="onnxruntime", example_inputs=[(4, 3)])
    _RUNS.clear()
    with pytest.raises(DTypeError, match="dtype float64 instead of float32"):
        compiled(fxkit.randn(4, 3).to(fxkit.float64))
    with pytest.raises(ShapeError, match="rank 1 instead of 2"):
        compiled(fxkit.randn(4))
    assert not _RUNS


def test_without_a_signature_another_dtype_recompiles_with_its_own_sessions():
    compiled = fxkit.compile(guarded, backend="onnxruntime")
    x = fxkit.randn(4, 3)
    assert_matches(compiled(x), guarded(x))
    assert_matches(compiled(x.to(fxkit.float64)), guarded(x.to(fxkit.float64)))
    compiled(x)
    assert compiled.compile_count == 2 and compiled.stats.cache_hits == 1
    assert len(compiled.backend.runners) == 4  # two partitions (around count_run) per dtype


# -- options -----------------------------------------------------------------------------------
def test_threads_do_not_spin_by_default_and_options_reach_the_session():
    model, inputs = zoo_model("mlp")
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=inputs, threads=1,
                             graph_optimization_level="basic")
    options = compiled.backend.delegate.session_options
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert options.intra_op_num_threads == 1
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    (runner,) = compiled.backend.runners.values()
    assert runner.session.get_providers() == ["CPUExecutionProvider"]


def test_an_unavailable_provider_is_refused_with_the_available_ones():
    with pytest.raises(LoweringError, match="NoSuchExecutionProvider are not available .*CPUExecutionProvider"):
        fxkit.compile(guarded, backend="onnxruntime", example_inputs=[(2, 2)],
                      providers=["NoSuchExecutionProvider"])


def test_backends_without_options_refuse_them():
    with pytest.raises(LoweringError, match="the numpy backend takes no options, got threads"):
        fxkit.compile(guarded, backend="numpy", threads=2)


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="no onnxruntime-gpu")
def test_the_cuda_provider_runs_the_partitions():
    model, inputs = zoo_model("lenet")
    compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=inputs,
                             providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert_matches(compiled(*inputs), model(*inputs))


@pytest.mark.slow
def test_import_fxkit_does_not_import_onnxruntime():
    code = "import sys, fxkit; assert 'onnxruntime' not in sys.modules and 'onnx' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
