"""fxkit.compile: zoo models match eager, specialisations are compiled once and cached,
the generated artefacts are exposed, and the pipeline folds conv-bn and drops dropout in eval."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.backends import Backend, CompiledModule, backend_names, get_backend, register_backend
from fxkit.backends.numpy_backend import NumpyBackend
from fxkit.errors import GraphError, IndexOutOfRangeError, LoweringError
from tests.backends.examples import chain, randn
from tests.transforms.model_paths import ZOO_SHAPES, assert_close, zoo_model, zoo_params


def op_names(graph):
    return [n.target.name for n in graph.nodes if n.op == "call" and hasattr(n.target, "name")]


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_match_eager(name, rng):
    model, _ = zoo_model(name)
    compiled = fxkit.compile(model, backend="numpy", example_inputs=ZOO_SHAPES[name])
    for _ in range(2):  # fresh inputs each time, never the ones it was compiled for
        inputs = tuple(randn(rng, *s) for s in ZOO_SHAPES[name])
        assert_close(compiled(*inputs), model(*inputs), rtol=1e-5, atol=1e-5 * _scale(model(*inputs)))
    assert compiled.compile_count == 1


def _scale(out):
    tensors = [out] if isinstance(out, fxkit.Tensor) else list(out)
    return max(float(np.abs(t.numpy()).max()) for t in tensors)


def test_chain_matches_a_float64_reference(rng):
    x = fxkit.from_numpy((rng.random(1000) * 0.02 + 0.99).astype(np.float32))
    expected = x.numpy().astype(np.float64) ** 1024
    got = fxkit.compile(chain)(x)
    assert got.dtype == fxkit.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4)


def test_lstm_cell_matches_a_numpy_reference(rng):
    cell = fxkit.models.LSTMCell(16, 32)
    x, h, c = randn(rng, 4, 16), randn(rng, 4, 32), randn(rng, 4, 32)
    hy, cy = fxkit.compile(cell)(x, h, c)
    w = {name: p.numpy().astype(np.float64) for name, p in cell.named_parameters()}
    gates = x.numpy() @ w["weight_ih"].T + w["bias_ih"] + h.numpy() @ w["weight_hh"].T + w["bias_hh"]
    i, f, g, o = np.split(gates, 4, axis=1)
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c_ref = sigmoid(f) * c.numpy() + sigmoid(i) * np.tanh(g)
    np.testing.assert_allclose(cy.numpy(), c_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hy.numpy(), sigmoid(o) * np.tanh(c_ref), rtol=1e-5, atol=1e-5)


def test_a_new_shape_compiles_once_then_hits_the_cache(rng):
    compiled = fxkit.compile(chain)
    assert compiled.compile_count == 0
    small, large = randn(rng, 4, 3) * 0.1, randn(rng, 8, 3) * 0.1
    for _ in range(3):
        compiled(small)
    assert compiled.compile_count == 1
    for _ in range(3):
        compiled(large)
    assert compiled.compile_count == 2
    compiled(small)
    compiled(large)
    assert compiled.stats.compilations == 2
    assert compiled.stats.cache_hits == 2
    assert [tuple(s.shape) for (s,) in compiled.specializations] == [(4, 3), (8, 3)]


def test_example_inputs_compile_at_once_and_other_sizes_once_each(rng):
    cell = fxkit.models.LSTMCell(8, 16)
    compiled = fxkit.compile(cell, example_inputs=[(2, 8), (2, 16), (2, 16)])
    assert compiled.compile_count == 1
    compiled(randn(rng, 2, 8), randn(rng, 2, 16), randn(rng, 2, 16))
    assert compiled.compile_count == 1
    for _ in range(2):
        hy, _ = compiled(randn(rng, 5, 8), randn(rng, 5, 16), randn(rng, 5, 16))
    assert hy.shape == (5, 16)
    assert compiled.compile_count == 2


def test_graph_code_and_kernel_sources_show_what_was_generated(rng):
    compiled = fxkit.compile(chain, example_inputs=[(5,)])
    assert op_names(compiled.graph) == ["mul"] * 10
    assert compiled.graph.output_node().args[0].meta["shape"] == (5,)
    assert compiled.code.startswith("def forward(x):\n    mul = np_multiply(x, x)\n")
    assert compiled.kernel_sources() == {}
    assert "backend='numpy'" in repr(compiled)


def test_artefacts_before_the_first_compilation_are_explained():
    compiled = fxkit.compile(chain)
    with pytest.raises(GraphError, match="not been compiled yet: call it once, or give example_inputs"):
        compiled.code  # noqa: B018


def test_eval_mode_folds_conv_bn_and_removes_dropout(rng):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5), nn.Flatten())
    model[1].running_mean._data[:] = rng.standard_normal(4)
    model[1].running_var._data[:] = rng.random(4) + 0.5
    model.eval()
    x = randn(rng, 2, 3, 6, 6)
    compiled = fxkit.compile(model, example_inputs=[x])
    names = op_names(compiled.graph)
    assert "batch_norm" not in names and "dropout" not in names
    assert names.count("conv2d") == 1
    assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


class _DataDependentLayer(nn.Module):
    """A layer the default tracer keeps whole (it looks built in) that cannot be traced through."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


_DataDependentLayer.__module__ = "fxkit.nn.test_layers"


def test_a_layer_that_cannot_be_flattened_is_refused_with_a_hint():
    model = nn.Sequential(nn.Linear(3, 3), _DataDependentLayer())
    with pytest.raises(LoweringError, match=r"(?s)cannot trace Sequential through its layers.*"
                                            r"hint: make the forward traceable"):
        fxkit.compile(model.eval(), example_inputs=[(2, 3)])
    with pytest.raises(LoweringError, match=r"(?s)hint: layers in training mode \(Sequential, 0, 1\) .*model\.eval"):
        fxkit.compile(model.train(), example_inputs=[(2, 3)])


def test_training_mode_dropout_stays_random():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    compiled = fxkit.compile(model, example_inputs=[(64, 8)])
    assert "dropout" in op_names(compiled.graph)
    out = compiled(fxkit.ones(64, 8)).numpy()
    assert 0 < np.count_nonzero(out == 0) < out.size


def test_keyword_inputs_bind_by_name(rng):
    cell = fxkit.models.LSTMCell(8, 16)
    x, h, c = randn(rng, 2, 8), randn(rng, 2, 16), randn(rng, 2, 16)
    compiled = fxkit.compile(cell)
    assert_close(compiled(x, hx=h, cx=c), cell(x, h, c), rtol=1e-6, atol=1e-6)
    with pytest.raises(GraphError, match="unexpected keyword argument.*hidden; its inputs are input, hx, cx"):
        compiled(x, h, hidden=c)


def test_outputs_keep_their_structure_as_tensors(rng):
    def f(x):
        best = ops.max(x, dim=1)
        return {"values": best.values * 2, "pair": (best.indices, x.sum())}

    x = randn(rng, 3, 4)
    out = fxkit.compile(f)(x)
    expected = f(x)
    assert list(out) == ["values", "pair"]
    assert_close(out["values"], expected["values"], rtol=0, atol=0)
    assert_close(out["pair"], expected["pair"], rtol=1e-6, atol=1e-6)
    assert out["pair"][1].shape == ()


def test_wrapped_functions_run_on_tensors(rng):
    x = randn(rng, 3, 4)
    compiled = fxkit.compile(_scaled_relu, example_inputs=[x])
    _SEEN.clear()
    out = compiled(x)
    np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy(), 0) * 3, rtol=1e-6)
    assert _SEEN == [fxkit.Tensor]


_SEEN = []


@fxkit.wrap
def _relu_times_three(x):
    _SEEN.append(type(x))
    return F.relu(x) * 3


def _scaled_relu(x):
    return _relu_times_three(x) + 0.0


def test_a_failing_node_is_named_with_its_source_line(rng):
    def f(x, index):
        return ops.gather(x * 2, 1, index)

    compiled = fxkit.compile(f)
    x = randn(rng, 2, 3)
    index = fxkit.tensor([[0, 1], [2, 0]])
    assert_close(compiled(x, index), f(x, index), rtol=0, atol=0)
    with pytest.raises(IndexOutOfRangeError, match=r"(?s)gather.*at .*test_compile.py:\d+ in f.*node: %gather"):
        compiled(x, fxkit.tensor([[0, 7], [2, 0]]))


def test_backends_are_looked_up_by_name():
    assert "numpy" in backend_names()
    assert isinstance(get_backend("numpy"), NumpyBackend)
    with pytest.raises(LoweringError, match="no backend named 'tpu'; available: .*numpy"):
        fxkit.compile(chain, backend="tpu")


def test_a_registered_backend_gets_its_passes_and_specs(rng):
    seen = []

    class Recording(NumpyBackend):
        name = "test-recording"

        def passes(self, gm, example_inputs):
            seen.append(("passes", tuple(s.shape for s in example_inputs)))
            return super().passes(gm, example_inputs)

        def lower(self, gm, specs):
            seen.append(("lower", [n.op for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, str)]))
            return super().lower(gm, specs)

    register_backend(Recording())
    x = randn(rng, 2, 3)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    assert_close(fxkit.compile(model, backend="test-recording")(x), model(x), rtol=1e-6, atol=1e-6)
    assert seen == [("passes", ((2, 3),)), ("lower", [])]  # layers are gone before lowering


def test_register_backend_refuses_other_objects():
    with pytest.raises(LoweringError, match="expected a Backend instance, got str"):
        register_backend("numpy")
    assert issubclass(NumpyBackend, Backend)
    assert isinstance(fxkit.compile(chain), CompiledModule)


def test_the_compiled_module_is_a_module_of_the_model(rng):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    compiled = fxkit.compile(model.eval())
    assert isinstance(compiled, nn.Module)
    assert [name for name, _ in compiled.named_parameters()] == ["_orig_mod.0.weight", "_orig_mod.0.bias"]
    assert list(compiled.state_dict()) == ["_orig_mod.0.weight", "_orig_mod.0.bias"]
    x = fxkit.ones(64, 4)
    assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)
    assert "dropout" not in op_names(compiled.graph)
    compiled.train()  # reaches the model, and the next call compiles for training mode
    assert model.training
    out = compiled(x).numpy()
    assert compiled.compile_count == 2 and "dropout" in op_names(compiled.graph)
    assert 0 < np.count_nonzero(out == 0) < out.size
    compiled.eval().double()
    assert compiled(fxkit.ones(2, 4, dtype=fxkit.float64)).dtype == fxkit.float64
