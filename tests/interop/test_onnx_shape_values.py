"""from_onnx keeps shape arithmetic exact in rank and value: the patterns torch's exporter writes
for swin's window padding, ``expand(-1)``, masks built from sizes, and ``Flatten`` at the last axis."""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fxkit  # noqa: E402
from tests.interop.zoo_onnx import relative_error, run_onnxruntime  # noqa: E402


def _model(nodes, inputs, outputs, consts=()):
    graph = helper.make_graph(nodes, "shape_values", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in consts])
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _check(proto, *arrays):
    """The import matches onnxruntime on ``arrays``; returns the imported module."""
    gm = fxkit.from_onnx(proto)
    gm.graph.lint()
    inputs = tuple(fxkit.from_numpy(a) for a in arrays)
    out = gm(*inputs)
    expected = run_onnxruntime(proto, inputs)
    for a, e in zip(out if isinstance(out, tuple) else (out,), expected):
        assert a.shape == e.shape
        assert relative_error(a, e) < 1e-6
    return gm


def _window_pad(window, height="H", width="W"):
    """pad x (N, H, W, C) at the bottom/right to a multiple of ``window``: swin's pattern."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"])]
    pieces = []
    for axis in (1, 2):
        nodes += [helper.make_node("Gather", ["shape", f"i{axis}"], [f"d{axis}"], axis=0),  # 0-d
                  helper.make_node("Mod", [f"d{axis}", "window"], [f"m{axis}"]),  # 0-d
                  helper.make_node("Sub", ["window", f"m{axis}"], [f"r{axis}"]),
                  helper.make_node("Mod", [f"r{axis}", "window"], [f"p{axis}"]),
                  helper.make_node("Unsqueeze", [f"p{axis}", "axes0"], [f"u{axis}"])]  # 1-D, one item
        pieces.append(f"u{axis}")
    nodes += [helper.make_node("Concat", ["zeros3", pieces[0], pieces[1], "zero1"], ["pads"], axis=0),
              helper.make_node("Pad", ["x", "pads"], ["y"])]
    consts = [("i1", np.array(1)), ("i2", np.array(2)), ("window", np.array(window)), ("axes0", np.array([0])),
              ("zeros3", np.zeros(5, np.int64)), ("zero1", np.zeros(1, np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", height, width, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "Hp", "Wp", 3])], consts)


def test_window_padding_with_static_sizes_folds_with_exact_ranks():
    """Gather gives a 0-d value, Unsqueeze a 1-D one: folded while importing, Concat must see those ranks."""
    x = np.random.default_rng(0).standard_normal((2, 9, 16, 3)).astype(np.float32)
    gm = _check(_window_pad(7, 9, 16), x)
    assert [n.target.name for n in gm.graph.nodes if n.op == "call"] == ["pad"]


def test_window_padding_keeps_ranks_with_dynamic_sizes():
    rng = np.random.default_rng(0)
    proto = _window_pad(7)
    gm = _check(proto, rng.standard_normal((2, 9, 16, 3)).astype(np.float32))
    # one import, other sizes: the padding is computed in the graph, not baked in
    x = rng.standard_normal((1, 14, 5, 3)).astype(np.float32)
    assert gm(fxkit.from_numpy(x)).shape == (1, 14, 7, 3)
    assert relative_error(gm(fxkit.from_numpy(x)), run_onnxruntime(proto, (fxkit.from_numpy(x),))[0]) < 1e-6


def test_expand_minus_one_written_as_where_equal():
    """expand(x, (N, -1, -1)) as the TorchScript exporter writes it: Where(Equal(shape, -1), 1, shape)."""
    nodes = [helper.make_node("Shape", ["batch"], ["bshape"]),
             helper.make_node("Gather", ["bshape", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_ones"], ["target"], axis=0),
             helper.make_node("Shape", ["target"], ["tshape"]),
             helper.make_node("ConstantOfShape", ["tshape"], ["ones"], value=numpy_helper.from_array(
                 np.array([1], np.int64))),
             helper.make_node("Mul", ["ones", "minus_one"], ["minus"]),
             helper.make_node("Equal", ["target", "minus"], ["is_minus"]),
             helper.make_node("Where", ["is_minus", "ones", "target"], ["sizes"]),
             helper.make_node("Expand", ["token", "sizes"], ["y"])]
    consts = [("zero", np.array(0)), ("axes0", np.array([0])), ("minus_ones", np.array([-1, -1])),
              ("minus_one", np.array(-1)), ("token", np.arange(6, dtype=np.float32).reshape(1, 2, 3))]
    proto = _model(nodes, [helper.make_tensor_value_info("batch", TensorProto.FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 3])], consts)
    gm = _check(proto, np.ones((3, 4), np.float32))
    assert gm(fxkit.ones(5, 4)).shape == (5, 2, 3)


def test_a_size_used_as_data_and_a_truncating_division():
    """arange(N) * L + arange(L): a mask index built from sizes (DistilBERT); ONNX Div truncates."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
             helper.make_node("Range", ["zero", "n", "one"], ["rows"]),
             helper.make_node("Unsqueeze", ["rows", "axes1"], ["rows2"]),
             helper.make_node("Mul", ["rows2", "length"], ["starts"]),
             helper.make_node("Neg", ["length"], ["negative"]),
             helper.make_node("Div", ["negative", "two"], ["half"]),  # -L / 2 truncates toward zero
             helper.make_node("Add", ["starts", "half"], ["y"])]
    consts = [("zero", np.array(0)), ("one", np.array(1)), ("two", np.array(2)), ("axes1", np.array([1]))]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, ["N", 1])], consts)
    gm = _check(proto, np.ones((3, 5), np.float32))
    np.testing.assert_array_equal(gm(fxkit.ones(2, 7)).numpy(), np.array([[-3], [4]]))


@pytest.mark.parametrize("axis", [3, -1, 0, 1])
def test_flatten_at_every_axis_including_the_rank(axis):
    nodes = [helper.make_node("Flatten", ["x"], ["y"], axis=axis)]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])])
    _check(proto, np.random.default_rng(1).standard_normal((4, 2, 3)).astype(np.float32))


def test_gather_with_computed_multidimensional_indices():
    """Gather(x, indices) with 2-D indices computed in the graph (negative ones wrap), as the dynamo
    exporter writes ``as_strided``-like window gathers."""
    nodes = [helper.make_node("Sub", ["ids", "offset"], ["shifted"]),  # some indices become negative
             helper.make_node("Gather", ["x", "shifted"], ["y"], axis=1)]
    consts = [("offset", np.array(2))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 3]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])]
    proto = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4, 3])], consts)
    rng = np.random.default_rng(2)
    gm = _check(proto, rng.standard_normal((3, 5, 3)).astype(np.float32),
                rng.integers(0, 5, (2, 4)).astype(np.int64))
    assert gm(fxkit.ones(1, 5, 3), fxkit.zeros(2, 4, dtype=fxkit.int64)).shape == (1, 2, 4, 3)
