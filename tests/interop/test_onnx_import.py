"""fxkit.from_onnx: exported zoo models come back as GraphModules computing the same outputs,
and hand-built ONNX graphs (the shape arithmetic other exporters write) import too."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fxkit  # noqa: E402
from fxkit.transforms import fuse_elementwise, infer_shapes  # noqa: E402
from tests.interop.zoo_onnx import as_tuple, exported, other_batch, relative_error, run_onnxruntime  # noqa: E402
from tests.transforms.model_paths import zoo_model, zoo_params  # noqa: E402

TOLERANCE = 1e-5


@pytest.mark.parametrize("name", zoo_params())
def test_reimported_zoo_model_matches_eager_and_onnxruntime(name):
    model, inputs, proto = exported(name)
    gm = fxkit.from_onnx(proto)
    assert isinstance(gm, fxkit.GraphModule)
    gm.graph.lint()
    fresh = other_batch(inputs)
    expected = as_tuple(model(*fresh))
    imported = as_tuple(gm(*fresh))
    from_runtime = run_onnxruntime(proto, fresh)
    for i, e, r in zip(imported, expected, from_runtime):
        assert relative_error(i, e) < TOLERANCE
        assert relative_error(i, r) < TOLERANCE


def test_parameters_keep_their_names(tmp_path):
    model, inputs = zoo_model("lenet")
    path = tmp_path / "lenet.onnx"
    fxkit.onnx.export(model, inputs, path)
    gm = fxkit.from_onnx(path)
    assert set(gm.state_dict()) == set(model.state_dict())
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(gm.state_dict()[key].numpy(), value.numpy())
    assert [n.target for n in gm.graph.nodes if n.op == "placeholder"] == ["x"]


@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_sources(source, tmp_path):
    model, inputs = zoo_model("mlp")
    proto = fxkit.onnx.export(model, inputs)
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, str(path))
    given = {"path": str(path), "bytes": proto.SerializeToString(), "proto": proto}[source]
    assert relative_error(fxkit.from_onnx(given)(*inputs), model(*inputs)) < TOLERANCE


def test_passes_apply_to_imported_models():
    model, inputs, proto = exported("lstm_cell")
    gm = fxkit.from_onnx(proto)
    infer_shapes(gm, *(("N", *x.shape[1:]) for x in inputs))
    assert str(gm.graph.output_node().meta["tensor_meta"][0].shape[0]) == "N"
    fused = fuse_elementwise(gm)
    for a, e in zip(fused(*inputs), model(*inputs)):
        assert relative_error(a, e) < TOLERANCE


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "handmade", inputs, outputs, [numpy_helper.from_array(a, n)
                                                                    for n, a in initializers])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _flatten_then_matmul(features_nodes, consts, input_dims):
    """y = x.reshape(x.shape[0], <features>) @ w * 0.5, the shape computed inside the graph."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             *features_nodes,
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
             helper.make_node("Concat", ["n1", "features"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["mm"]),
             helper.make_node("Constant", [], ["half"], value_float=0.5),
             helper.make_node("Mul", ["mm", "half"], ["y"])]
    consts = consts + [("zero", np.array(0, np.int64)), ("axes0", np.array([0], np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_dims)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], consts)


def test_shape_arithmetic_as_other_exporters_write_it():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    x = rng.standard_normal((7, 3, 4)).astype(np.float32)
    reference = x.reshape(7, 12).astype(np.float64) @ w * 0.5
    by_product = [helper.make_node("Slice", ["shape", "one", "three"], ["rest"]),
                  helper.make_node("ReduceProd", ["rest"], ["features"], keepdims=1)]
    by_gathers = [helper.make_node("Gather", ["shape", "one"], ["rest_0"], axis=0),
                  helper.make_node("Gather", ["shape", "two"], ["rest_1"], axis=0),
                  helper.make_node("Mul", ["rest_0", "rest_1"], ["features"])]
    consts = [("w", w), ("one", np.array([1], np.int64)), ("two", np.array([2], np.int64)),
              ("three", np.array([3], np.int64))]
    for features in (by_product, by_gathers):
        proto = _flatten_then_matmul(features, consts, ["N", 3, 4])
        gm = fxkit.from_onnx(proto)
        np.testing.assert_allclose(gm(fxkit.from_numpy(x)).numpy(), reference, rtol=1e-5, atol=1e-5)
        assert relative_error(gm(fxkit.from_numpy(x)), run_onnxruntime(proto, (fxkit.from_numpy(x),))[0]) < 1e-5
    # Known dims fold while importing; a product over a dynamic dim stays in the graph, item by item.
    gm = fxkit.from_onnx(_flatten_then_matmul(by_product, consts, ["N", "C", 4]))
    np.testing.assert_allclose(gm(fxkit.from_numpy(x)).numpy(), reference, rtol=1e-5, atol=1e-5)


def test_asymmetric_conv_pads_and_gemm_forms():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    c = rng.standard_normal((5,)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[0, 1, 1, 2], strides=[1, 2]),
             helper.make_node("GlobalAveragePool", ["conv"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
             helper.make_node("Concat", ["flat", "flat"], ["wide"], axis=1),
             helper.make_node("Slice", ["wide", "s0", "s1", "s2"], ["six"]),
             helper.make_node("Gemm", ["six", "b", "c"], ["y"], alpha=0.5, beta=2.0),
             helper.make_node("Clip", ["y", "lo", "hi"], ["clipped"]),
             helper.make_node("Softmax", ["clipped"], ["out"], axis=-1)]
    consts = [("w", w), ("b", b), ("c", c), ("s0", np.array([1], np.int64)), ("s1", np.array([7], np.int64)),
              ("s2", np.array([1], np.int64)), ("lo", np.array(-1.0, np.float32)), ("hi", np.array(1.5, np.float32))]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 9])],
                   [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 5])], consts)
    onnx.checker.check_model(proto, full_check=True)
    x = fxkit.randn(3, 2, 8, 9)
    assert relative_error(fxkit.from_onnx(proto)(x), run_onnxruntime(proto, (x,))[0]) < TOLERANCE


def test_quantized_qdq_model_reimports():
    # NOTE: x86_qconfig's 7-bit weights keep onnxruntime's fused int8 kernels exact on AVX2-only
    # CPUs too (8-bit weights saturate their int16 pair sums there).
    from fxkit.transforms.quantize import calibrate, convert, prepare, x86_qconfig

    model, inputs = zoo_model("mlp")
    prepared = prepare(fxkit.symbolic_trace(model), x86_qconfig)
    calibrate(prepared, [inputs], progress=False)
    quantized = convert(prepared, report=False)
    proto = fxkit.onnx.export(quantized, inputs)
    gm = fxkit.from_onnx(proto)
    assert any(n.is_op("quantize_affine") for n in gm.graph.nodes)
    np.testing.assert_allclose(gm(*inputs).numpy(), run_onnxruntime(proto, inputs)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gm(*inputs).numpy(), run_onnxruntime(proto, inputs, optimize=False)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name", ["transformer_block", "lstm_cell", "lenet",
                                  pytest.param("resnet18", marks=pytest.mark.slow)])
def test_files_written_by_torch_onnx_export_import(name, tmp_path):
    torch = pytest.importorskip("torch")
    from tests.models import torch_reference as R

    build, shapes = {"transformer_block": (R.TransformerBlock, [(2, 16, 128)]), "lenet": (R.Net, [(2, 1, 28, 28)]),
                     "lstm_cell": (lambda: R.LSTMCell(8, 16), [(2, 8), (2, 16), (2, 16)]),
                     "resnet18": (R.resnet18, [(2, 3, 32, 32)])}[name]
    torch.manual_seed(0)
    model = build().eval()
    names = [f"input_{i}" for i in range(len(shapes))]
    path = tmp_path / f"{name}.onnx"
    try:
        with warnings.catch_warnings():  # the exporter's deprecation and tracer warnings are PyTorch's business
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(torch.randn(*s) for s in shapes), str(path), dynamo=False,
                              opset_version=17, input_names=names, dynamic_axes={n: {0: "N"} for n in names})
    except Exception as exc:  # noqa: BLE001  (the exporter's own dependencies may be missing)
        pytest.skip(f"torch.onnx.export is unavailable here: {exc}")
    gm = fxkit.from_onnx(path)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, *s[1:])).astype(np.float32) for s in shapes]
    with torch.no_grad():
        expected = as_tuple(model(*(torch.from_numpy(a) for a in arrays)))
    for a, e in zip(as_tuple(gm(*(fxkit.from_numpy(a) for a in arrays))), expected):
        assert relative_error(a, e.numpy()) < TOLERANCE


@pytest.mark.parametrize("fn_name", ["_activations_sorts_norms", "_attention"])
@pytest.mark.parametrize("opset", [17, 18])
def test_exported_activations_sorts_norms_attention_reimport(fn_name, opset):
    from tests.interop import test_onnx_export

    gm = fxkit.symbolic_trace(getattr(test_onnx_export, fn_name))
    rng = np.random.default_rng(6)
    inputs = tuple(fxkit.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32)) for _ in range(2))
    proto = fxkit.onnx.export(gm, inputs, opset=opset)
    imported = fxkit.from_onnx(proto)
    fresh = tuple(fxkit.from_numpy(rng.standard_normal((5, 3, 4)).astype(np.float32)) for _ in range(2))
    for i, (a, e) in enumerate(zip(as_tuple(imported(*fresh)), as_tuple(gm(*fresh)))):
        if e.dtype.is_floating_point:
            assert relative_error(a, e) < TOLERANCE, f"output {i}"
        else:
            np.testing.assert_array_equal(a.numpy(), e.numpy(), err_msg=f"output {i}")


def test_onnx_activation_norm_and_topk_nodes_import():
    opset = 21  # GroupNormalization's scale and bias per channel (opset 18's per group are deprecated)
    rng = np.random.default_rng(7)
    scale, bias = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("HardSigmoid", ["x"], ["hs"]),  # ONNX's default alpha 0.2, not PyTorch's 1/6
             helper.make_node("HardSigmoid", ["x"], ["hs6"], alpha=1.0 / 6.0, beta=0.5),
             helper.make_node("HardSwish", ["x"], ["hw"]),
             helper.make_node("Mish", ["x"], ["mish"]),
             helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn"], num_groups=2, epsilon=1e-3),
             helper.make_node("InstanceNormalization", ["x", "c_scale", "c_bias"], ["inorm"]),
             helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=0)]
    consts = [("scale", scale), ("bias", bias), ("c_scale", rng.standard_normal(4).astype(np.float32)),
              ("c_bias", rng.standard_normal(4).astype(np.float32)), ("k", np.array([3], np.int64))]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4, 5]) for n in
               ("hs", "hs6", "hw", "mish", "gn", "inorm")]
    outputs += [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["N", 3, 5]),
                helper.make_tensor_value_info("indices", TensorProto.INT64, ["N", 3, 5])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5])], outputs, consts,
                   opset=opset)
    x = fxkit.from_numpy(rng.standard_normal((3, 4, 5)).astype(np.float32) * 3)
    gm = fxkit.from_onnx(proto)
    targets = {n.target.name for n in gm.graph.nodes if n.op == "call" and hasattr(n.target, "name")}
    assert {"hardsigmoid", "hardswish", "mish", "group_norm", "instance_norm", "topk"} <= targets
    try:
        expected = run_onnxruntime(proto, (x,))
    except Exception as exc:  # noqa: BLE001  (an onnxruntime without this opset's kernels)
        pytest.skip(f"onnxruntime cannot run opset {opset} here: {exc}")
    for i, (a, e) in enumerate(zip(as_tuple(gm(x)), expected)):
        np.testing.assert_allclose(a.numpy(), e, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def test_onnx_depth_space_isinf_and_1d_pool_nodes_import():
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD"),
             helper.make_node("DepthToSpace", ["x"], ["dcr"], blocksize=2, mode="DCR"),
             helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
             helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["neg_inf"], detect_positive=0),
             helper.make_node("IsInf", ["x"], ["pos_inf"], detect_negative=0),
             helper.make_node("Reshape", ["x", "rows"], ["rows_x"]),
             helper.make_node("MaxPool", ["rows_x"], ["max1d"], kernel_shape=[3], strides=[2], pads=[1, 1]),
             helper.make_node("AveragePool", ["rows_x"], ["avg1d"], kernel_shape=[2], count_include_pad=1)]
    outputs = [helper.make_tensor_value_info("crd", TensorProto.FLOAT, ["N", 2, 8, 12]),
               helper.make_tensor_value_info("dcr", TensorProto.FLOAT, ["N", 2, 8, 12]),
               helper.make_tensor_value_info("s2d", TensorProto.FLOAT, ["N", 32, 2, 3])]
    outputs += [helper.make_tensor_value_info(n, TensorProto.BOOL, ["N", 8, 4, 6]) for n in
                ("inf", "neg_inf", "pos_inf")]
    outputs += [helper.make_tensor_value_info("max1d", TensorProto.FLOAT, ["N", 8, 12]),
                helper.make_tensor_value_info("avg1d", TensorProto.FLOAT, ["N", 8, 12])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 4, 6])], outputs,
                   [("rows", np.array([0, 8, 24], np.int64))])
    x = rng.standard_normal((3, 8, 4, 6)).astype(np.float32)
    x.flat[::7], x.flat[3::11] = np.inf, -np.inf
    gm = fxkit.from_onnx(proto)
    targets = {n.target.name for n in gm.graph.nodes if n.op == "call" and hasattr(n.target, "name")}
    assert {"pixel_shuffle", "pixel_unshuffle", "isinf", "max_pool1d", "avg_pool1d"} <= targets
    expected = run_onnxruntime(proto, (fxkit.from_numpy(x),))
    for i, (a, e) in enumerate(zip(as_tuple(gm(fxkit.from_numpy(x))), expected)):
        np.testing.assert_array_equal(a.numpy(), e, err_msg=f"output {i}")
