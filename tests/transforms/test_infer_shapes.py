"""infer_shapes: the registry's rules, leaf bodies traced on metas, symbolic dims; agrees with ShapeProp."""
import copy
import importlib
import pickle
import time
import tracemalloc

import numpy as np
import pytest

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms import ShapeProp, Sym, infer_shapes
from tests.transforms.model_paths import ZOO_SHAPES, check_model_paths, zoo_model, zoo_params
from tests.transforms.shape_models import MULTI_OUTPUT_GRAPH, MultiOutput

N = Sym.symbol("N")
# NOTE: fxkit.transforms.infer_shapes is the function; the module holds the body cache.
infer_module = importlib.import_module("fxkit.transforms.infer_shapes")


def metas(gm):
    return [(n.name, n.meta.get("tensor_meta")) for n in gm.graph.nodes]


def test_same_text_as_shape_prop_without_running():
    gm = fxkit.symbolic_trace(MultiOutput())
    assert infer_shapes(gm, (5, 4)) is gm
    assert str(gm.graph) == MULTI_OUTPUT_GRAPH


@pytest.mark.parametrize("name", zoo_params())
def test_agrees_with_shape_prop_on_every_zoo_model(name):
    model, inputs = zoo_model(name)

    def shape_prop(gm):
        ShapeProp(gm).propagate(*inputs)
        return gm

    def inferred(gm):
        return infer_shapes(gm, *ZOO_SHAPES[name])

    # both annotate only: every execution path still equals eager exactly
    _, results = check_model_paths(model, inputs, passes=[shape_prop, inferred])
    assert metas(results["inferred"]) == metas(results["shape_prop"])
    assert str(results["inferred"].graph) == str(results["shape_prop"].graph)


@pytest.mark.parametrize("name", zoo_params())
def test_symbolic_batch_on_every_zoo_model_substitutes_to_the_concrete_shapes(name):
    model, _ = zoo_model(name)
    gm = fxkit.symbolic_trace(model)
    infer_shapes(gm, *[("N", *s[1:]) for s in ZOO_SHAPES[name]])
    symbolic = metas(gm)
    infer_shapes(gm, *ZOO_SHAPES[name])
    concrete = metas(gm)
    batch = ZOO_SHAPES[name][0][0]

    def subs(meta):
        if isinstance(meta, TensorMeta):
            return meta._replace(shape=tuple(d.subs(N=batch) if isinstance(d, Sym) else d for d in meta.shape))
        if isinstance(meta, tuple):
            return type(meta)(*map(subs, meta)) if hasattr(meta, "_fields") else tuple(map(subs, meta))
        return meta

    assert [(name, subs(m)) for name, m in symbolic] == concrete
    out = gm.graph.output_node()
    assert "N" in {str(d) for d in _first_meta(symbolic[-1][1]).shape}, out


def _first_meta(meta):
    return meta if isinstance(meta, TensorMeta) else next(m for m in meta if isinstance(m, TensorMeta))


def test_symbolic_meta_survives_copy_pickle_and_save(tmp_path):
    gm = fxkit.symbolic_trace(MultiOutput())
    infer_shapes(gm, ("N", 4))
    expected = str(gm.graph)
    assert str(copy.deepcopy(gm).graph) == expected
    assert str(pickle.loads(pickle.dumps(gm)).graph) == expected
    fxkit.save(gm, tmp_path / "gm.zip")
    x = fxkit.randn(3, 4)
    assert fxkit.load(tmp_path / "gm.zip")(x)[0].shape == (3, 1)


def test_spec_forms():
    gm = fxkit.symbolic_trace(MultiOutput())
    for spec in [(5, 4), [5, 4], ((5, 4), fxkit.float32), fxkit.randn(5, 4), TensorMeta((5, 4), fxkit.float32)]:
        infer_shapes(gm, spec)
        assert str(gm.graph) == MULTI_OUTPUT_GRAPH
    with pytest.raises(fxkit.DTypeError) as info:  # the Linear's weights are float32
        infer_shapes(gm, ((5, 4), fxkit.float64))
    assert "linear: expected all inputs to have the same dtype, got float64 and float32" in str(info.value)
    assert "in the traced body of Linear: %linear = call[linear](%input, %weight, %bias)" in str(info.value)
    assert "node: %fc = call[self.fc](%relu)" in str(info.value)
    relu = fxkit.symbolic_trace(lambda x: x.relu())
    infer_shapes(relu, ((5, 4), fxkit.float64))
    assert relu.graph.output_node().meta["tensor_meta"] == TensorMeta((5, 4), fxkit.float64)
    with pytest.raises(ShapeError, match="an input spec is a Tensor, a shape tuple like .* got str 'x'"):
        infer_shapes(gm, "x")


def test_symbolic_expressions_print():
    def f(x):
        doubled = fxkit.cat([x, x], 0)
        tokens = x.reshape(-1, 8)
        return doubled, tokens, x.view(x.shape[0] * 2, -1)

    gm = fxkit.symbolic_trace(f)
    infer_shapes(gm, ("N", 196, 8))
    text = str(gm.graph)
    assert "f32[2*N, 196, 8]" in text
    assert "f32[N*196, 8]" in text
    assert "f32[N*2, 784]" in text  # reads as the code wrote it: x.shape[0] * 2


def test_resnet_symbolic_spatial_dims_read_as_floor_divisions():
    model, _ = zoo_model("resnet18")
    gm = fxkit.symbolic_trace(model)
    infer_shapes(gm, ("N", 3, "H", "W"))
    text = str(gm.graph)
    assert "%conv1                 : f32[N, 64, (H + 1)//2, (W + 1)//2]" in text
    assert "%maxpool               : f32[N, 64, (H + 3)//4, (W + 3)//4]" in text
    assert "f32[N, 512, (H + 31)//32, (W + 31)//32]" in text
    assert "%fc                    : f32[N, 1000]" in text


class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2)

    def forward(self, q, kv):
        return self.attn(q, kv, kv)


def test_leaf_with_control_flow_on_shapes():
    # MultiheadAttention branches on x.ndim and unpacks x.shape: the body is traced on metas.
    model = Attend()
    gm = fxkit.symbolic_trace(model)
    for q, kv in [((5, 3, 16), (7, 3, 16)), ((5, 16), (7, 16))]:
        infer_shapes(gm, q, kv)
        inferred = gm.graph.output_node().meta["tensor_meta"]
        out, weights = model(fxkit.randn(*q), fxkit.randn(*kv))
        assert inferred[0].shape == out.shape and inferred[1].shape == weights.shape
    infer_shapes(gm, ("L", "N", 16), ("S", "N", 16))
    out_meta, weight_meta = gm.graph.output_node().meta["tensor_meta"]
    assert [str(d) for d in out_meta.shape] == ["L", "N", "16"]
    assert [str(d) for d in weight_meta.shape] == ["N", "L", "S"]


def test_undecidable_check_in_a_leaf_names_the_dimension_and_node():
    gm = fxkit.symbolic_trace(Attend())
    with pytest.raises(ShapeError) as info:
        infer_shapes(gm, (5, 3, "E"), (7, 3, "E"))
    message = str(info.value)
    assert "cannot decide E != 16 for the symbolic dimension(s) E" in message
    assert "give this dimension as an int" in message
    assert "node: %attn = call[self.attn](%q, %kv, %kv)" in message


def test_rule_that_needs_a_concrete_dim_says_so():
    gm = fxkit.symbolic_trace(lambda x: x.chunk(2, 0)[0])
    with pytest.raises(ShapeError) as info:
        infer_shapes(gm, ("N", 4))
    assert "chunk: the number of pieces of symbolic dimension 0 (size N) depends on its value" in str(info.value)
    assert "node: %chunk = call[chunk](%x, 2, 0)" in str(info.value)


def test_shape_error_names_the_node():
    gm = fxkit.symbolic_trace(MultiOutput())
    with pytest.raises(ShapeError) as info:
        infer_shapes(gm, (5, 3))
    assert "node: %fc = call[self.fc](%relu)" in str(info.value)
    assert "in_features=4" in str(info.value)


def test_training_mode_batchnorm_is_inferred_without_touching_its_state():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU()).train()
    gm = fxkit.symbolic_trace(model)
    before = gm.get_submodule("1").num_batches_tracked.numpy().copy()
    infer_shapes(gm, ("N", 3, 9, 9))
    assert str(gm.graph.output_node().meta["tensor_meta"].shape[2]) == "4"
    assert gm.training and all(m.training for m in gm.modules())
    np.testing.assert_array_equal(gm.get_submodule("1").num_batches_tracked.numpy(), before)


def test_wrapped_function_is_inferred_from_its_body():
    @fxkit.wrap
    def pad_to_even(x):
        return fxkit.cat([x, x[:1]], 0) if x.shape[0] % 2 else x

    gm = fxkit.symbolic_trace(lambda x: pad_to_even(x).relu())
    for rows, expected in ((3, 4), (4, 4)):
        infer_shapes(gm, (rows, 2))
        assert gm.graph.output_node().meta["tensor_meta"].shape == (expected, 2)
        assert gm(fxkit.randn(rows, 2)).shape == (expected, 2)


def test_getattr_of_dtype_and_python_arithmetic_on_sizes():
    def f(x):
        return x.to(x.dtype).reshape(x.shape[0] * x.shape[1], x.shape[2] // 2, 2)

    gm = fxkit.symbolic_trace(f)
    infer_shapes(gm, (("N", 3, 8), fxkit.float16))
    assert [str(d) for d in gm.graph.output_node().meta["tensor_meta"].shape] == ["N*3", "4", "2"]
    assert gm.graph.output_node().meta["tensor_meta"].dtype is fxkit.float16


@pytest.mark.slow
def test_resnet50_batch_256_allocates_under_10_mb():
    model, _ = zoo_model("resnet50")
    gm = fxkit.symbolic_trace(model)
    infer_module._BODIES.clear()  # measure the cold run: every leaf body traced
    tracemalloc.start()
    try:
        start = time.perf_counter()
        infer_shapes(gm, (256, 3, 224, 224))
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20, f"infer_shapes peaked at {peak / 2**20:.1f} MiB"
    assert gm.graph.output_node().meta["shape"] == (256, 1000)
    print(f"infer_shapes(resnet50, 256x3x224x224): {seconds * 1e3:.0f} ms cold (under tracemalloc), "
          f"peak {peak / 2**20:.2f} MiB")
