"""ShapeProp: runs the graph and records shape, dtype, device (and tensor_meta) on every node."""
import numpy as np
import pytest

import fxkit
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms import ShapeProp
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import zoo_model, zoo_params
from tests.transforms.shape_models import MULTI_OUTPUT_GRAPH, MultiOutput


def random_input(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def test_records_meta_and_the_printer_shows_it(rng):
    model = MultiOutput()
    gm = fxkit.symbolic_trace(model)
    x = random_input(rng, 5, 4)
    out = ShapeProp(gm).propagate(x)
    assert_same(out, model(x))
    assert str(gm.graph) == MULTI_OUTPUT_GRAPH
    nodes = {n.name: n for n in gm.graph.nodes}
    fc = nodes["fc"].meta
    assert fc["shape"] == (5, 6) and fc["dtype"] is fxkit.float32 and fc["device"] == fxkit.device("cpu")
    assert fc["tensor_meta"] == TensorMeta((5, 6), fxkit.float32, fxkit.device("cpu"))


def test_multi_output_convention(rng):
    gm = fxkit.symbolic_trace(MultiOutput())
    ShapeProp(gm).propagate(random_input(rng, 5, 4))
    nodes = {n.name: n for n in gm.graph.nodes}
    chunk = nodes["chunk"].meta
    assert chunk["shape"] == ((5, 3), (5, 3)) and chunk["dtype"] == (fxkit.float32, fxkit.float32)
    top = nodes["max"].meta
    assert top["dtype"] == (fxkit.float32, fxkit.int64)
    assert top["tensor_meta"].values.shape == (5,) and top["tensor_meta"].indices.dtype is fxkit.int64
    out = gm.graph.output_node().meta["tensor_meta"]
    assert [m.shape for m in out] == [(5, 1), (5,)]
    # size queries hold no tensor: no shape entries
    assert "shape" not in nodes["size"].meta and "tensor_meta" not in nodes["getitem"].meta


def test_rerun_replaces_old_meta(rng):
    gm = fxkit.symbolic_trace(MultiOutput())
    prop = ShapeProp(gm)
    prop.propagate(random_input(rng, 5, 4))
    prop.propagate(random_input(rng, 2, 4))
    assert gm.graph.output_node().meta["tensor_meta"][0].shape == (2, 1)
    assert "f32[5, 6]" not in str(gm.graph) and "f32[2, 6]" in str(gm.graph)


def test_errors_name_the_node(rng):
    gm = fxkit.symbolic_trace(MultiOutput())
    with pytest.raises(fxkit.ShapeError) as info:
        ShapeProp(gm).propagate(random_input(rng, 5, 3))
    assert "node: %fc = call[self.fc](%relu)" in str(info.value)
    assert "in_features=4" in str(info.value)


@pytest.mark.parametrize("name", zoo_params())
def test_every_zoo_model_output_matches_eager(name):
    model, inputs = zoo_model(name)
    gm = fxkit.symbolic_trace(model)
    expected = model(*inputs)
    assert_same(ShapeProp(gm).propagate(*inputs), expected)
    out_meta = gm.graph.output_node().meta["tensor_meta"]
    flat_expected = expected if isinstance(expected, tuple) else (expected,)
    flat_meta = (out_meta,) if isinstance(out_meta, TensorMeta) else out_meta
    for meta, tensor in zip(flat_meta, flat_expected):
        assert meta.shape == tuple(tensor.shape) and meta.dtype is tensor.dtype
    for node in gm.graph.find_nodes(op="call"):
        assert "tensor_meta" in node.meta or node.target in (fxkit.ops.size, fxkit.ops.getitem)
